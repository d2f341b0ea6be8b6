import Logging
import NIOCore
import PluginProtocol

/// Requests from CLI clients on the control socket.
extension Supervisor {
    func controlFrame(_ connection: ControlConnection, _ frame: ByteBuffer) {
        frame.withUnsafeReadableBytes { bytes in
            let env: Envelope
            do {
                env = try Envelope.parse(bytes, maxDepth: config.maxJSONDepth)
            } catch {
                return dropClient(connection, ErrorBody(.protocolViolation, "invalid frame: \(error)"))
            }
            guard let kind = env.kind else {
                return dropClient(connection, ErrorBody(.protocolViolation, "unknown message type '\(env.typeName ?? "(none)")'"))
            }
            guard let id = env.id else {
                return dropClient(connection, ErrorBody(.protocolViolation, "\(kind.rawValue) without an unsigned integer id"))
            }
            connection.outstanding += 1
            let origin = ReplyOrigin.client(connection, id: id)
            switch kind {
            case .call, .open:
                switch validateRequest(kind, env, bytes) {
                case .failure(let error): answer(origin, error: error)
                case .success(let target):
                    if let error = forward(kind, to: target, from: nil, env: env, bytes: bytes, origin: origin) {
                        if records[target] == nil {
                            // Maybe the catalog offers it on demand: install it, then forward this request,
                            // unless the request's own timeout ends first.
                            let copy = Array(bytes)
                            final class Once: @unchecked Sendable { var settled = false }
                            let once = Once()
                            let requested = env.timeoutMs ?? 0
                            let waitMs = requested > 0 ? Int(min(requested, 24 * 3_600_000)) : config.callTimeoutMs
                            let started = onDemand(target) { [self] failure in
                                guard !once.settled else { return }
                                once.settled = true
                                if let failure { return answer(origin, error: failure) }
                                copy.withUnsafeBytes { raw in
                                    guard let env = try? Envelope.parse(raw, maxDepth: config.maxJSONDepth) else {
                                        return answer(origin, error: ErrorBody(.badRequest, "the request could not be replayed"))
                                    }
                                    if let error = forward(kind, to: target, from: nil, env: env, bytes: raw, origin: origin) {
                                        answer(origin, error: error)
                                    }
                                }
                                flushDirty()
                            }
                            if started {
                                loop.scheduleTask(in: .milliseconds(Int64(waitMs))) { [self] in
                                    guard !once.settled else { return }
                                    once.settled = true
                                    answer(origin, error: ErrorBody(.timeout, "\(target) was still being installed on demand after \(waitMs) ms"))
                                    flushDirty()
                                }
                                return
                            }
                        }
                        answer(origin, error: error)
                    }
                }
            case .status:
                respond(origin) { try ProtocolJSON.encode(self.statusList()) }
            case .send:
                let name = Envelope.string(bytes, env.name) ?? ""
                let allowed: [EventName] = [.memoryWarning, .background, .foreground]
                guard let event = EventName(rawValue: name), allowed.contains(event) else {
                    return answer(origin, error: ErrorBody(.badRequest, "cannot send '\(name)'; events that can be sent: \(allowed.map(\.rawValue).joined(separator: ", "))"))
                }
                let only = Envelope.string(bytes, env.target)
                if let only, records[only] == nil {
                    return answer(origin, error: ErrorBody(.notFound, "no plugin \(only) is installed"))
                }
                broadcast(event, only: only) { [self] delivered, failed in
                    struct Outcome: Encodable { var event: String; var delivered: [String]; var failed: [String: String] }
                    respond(origin) { try ProtocolJSON.encode(Outcome(event: name, delivered: delivered, failed: failed)) }
                }
            case .restart:
                guard let target = Envelope.string(bytes, env.target) else {
                    return answer(origin, error: ErrorBody(.badRequest, "restart needs a \"target\""))
                }
                guard records[target] != nil else {
                    return answer(origin, error: ErrorBody(.notFound, "no plugin \(target) is installed"))
                }
                restartCommand(target) { [self] problem in
                    if let problem {
                        answer(origin, error: ErrorBody(.unavailable, problem))
                    } else {
                        respond(origin) { try ProtocolJSON.encode(self.statusList().first { $0.identifier == target }) }
                    }
                    flushDirty()
                }
            case .install:
                guard let source = Envelope.string(bytes, env.uri), !source.isEmpty else {
                    return answer(origin, error: ErrorBody(.badRequest, "install needs a \"uri\": an archive path or URL"))
                }
                installRequest(origin, source: source, params: installParams(env, bytes))
            case .update:
                updateRequest(origin, params: installParams(env, bytes))
            case .uninstall:
                guard let target = Envelope.string(bytes, env.target) else {
                    return answer(origin, error: ErrorBody(.badRequest, "uninstall needs a \"target\""))
                }
                uninstallRequest(origin, identifier: target)
            case .stop:
                respond(origin) { Array(#"{"stopping":true}"#.utf8) }
                flushDirty()
                shutdown(reason: "supervisor stop")
            default:
                answer(origin, error: ErrorBody(.badRequest, "'\(kind.rawValue)' is not a request this socket takes"))
            }
        }
    }

    /// Whether `pid` is one of our workers (they may never use the control socket).
    func isWorker(pid: Int32) -> Bool { byPID[pid] != nil || preflightPIDs.withLock { $0.contains(pid) } }
    func workerName(pid: Int32) -> String { byPID[pid]?.identifier ?? "?" }

    func installParams(_ env: Envelope, _ bytes: UnsafeRawBufferPointer) -> InstallParams {
        guard let p = env.params else { return InstallParams() }
        return (try? ProtocolJSON.decode(InstallParams.self, from: UnsafeRawBufferPointer(rebasing: bytes[p]))) ?? InstallParams()
    }

    func respond(_ origin: ReplyOrigin, _ make: () throws -> [UInt8]) {
        do {
            let result = try make()
            guard case .client(let connection, let id) = origin else { return }
            connection.outstanding -= 1
            guard !connection.closed else { return }
            var b = FrameBuilder(kind: .reply, capacity: result.count)
            b.uint("id", id)
            b.raw("result", result)
            write(b.finish(), to: connection.channel)
        } catch {
            answer(origin, error: ErrorBody(.badRequest, "\(error)"))
        }
    }

    /// Tells a client why, then drops it.
    func dropClient(_ connection: ControlConnection, _ error: ErrorBody) {
        logger.warning("dropping control client: \(error.message)")
        write(Self.errorFrame(id: 0, error), to: connection.channel)
        flushDirty()
        connection.closed = true
        connection.channel.close(promise: nil)
    }

    func statusList() -> [PluginStatus] {
        order.compactMap { records[$0] }.map { r in
            PluginStatus(
                identifier: r.identifier, version: r.manifest.version.description, state: r.state.shown,
                pid: r.instance?.pid, restarts: r.restarts, lastExit: r.lastExit, dependencies: r.dependencyIDs,
                variant: r.variant ?? r.library, sandbox: r.instance?.sandbox ?? [],
                sandboxMissing: r.instance.map(\.sandboxMissing), error: r.problem, timings: r.instance?.timings)
        }
    }

    /// Starts a stopped plugin from a clean slate (restart history and failure cleared): now, or once
    /// its dependencies run. `done` hears nil when it runs, or why it did not start.
    func startAgain(_ record: PluginRecord, _ done: @escaping (String?) -> Void) {
        guard !shuttingDown else { return done("the supervisor is shutting down") }
        record.restartTimes = []
        record.problem = nil
        record.failedByDependency = false
        record.startWaiters.append(done)
        if record.dependencyIDs.allSatisfy({ records[$0]?.state == .running }) {
            if record.hasRun { record.restarts += 1 }
            spawn(record)
        } else {
            record.state = .waiting
            startWaitingPlugins()
        }
    }

    /// `supervisor restart <id>`: stop it if running, clear its failure and restart history, start it.
    func restartCommand(_ id: String, _ done: @escaping (String?) -> Void) {
        guard let record = records[id] else { return done("no plugin \(id) is installed") }
        if let problem = catalog.unstartable[id] { return done(problem) }
        guard !shuttingDown else { return done("the supervisor is shutting down") }
        record.pendingRestart?.cancel()
        record.pendingRestart = nil
        let start: () -> Void = { [self] in startAgain(record, done) }
        if record.instance != nil {
            stopPlugin(record) { start() }
        } else {
            start()
        }
    }
}
