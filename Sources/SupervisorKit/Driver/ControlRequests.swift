#if canImport(Glibc)
import Glibc
#endif
import Bundles
import Logging
import CPluginABI
import NIOCore
import PluginProtocol
import Protocol
import SupervisorCore

/// What the control socket takes (SPEC §6), one of the engine's inputs: each request is checked
/// here and handed to the component that does it.
extension Engine {
    func controlRequest(_ connection: ControlConnection, _ frame: ByteBuffer) {
        frame.withUnsafeReadableBytes { bytes in
            let env: Envelope
            do {
                env = try Envelope.parse(bytes, maxDepth: config.maxJSONDepth)
            } catch {
                return control.drop(connection, ErrorBody(.protocolViolation, "invalid frame: \(error)"))
            }
            guard let kind = env.kind else {
                return control.drop(connection, ErrorBody(.protocolViolation, env.unknownType(in: bytes)))
            }
            // A client's counts of the calls it sent over its direct links: no answer, no id needed.
            if kind == .linkCalls {
                if let error = router.linkCallsReported(by: connection, bytes) { control.drop(connection, error) }
                return
            }
            guard let id = env.id else {
                return control.drop(connection, ErrorBody(.protocolViolation, "\(kind.rawValue) without an unsigned integer id"))
            }
            switch kind {
            case .reply:
                // A client gives a link back (`unlink`), or answers a plugin's `@host` call (HostMethods).
                if !router.clientUnlinked(connection, id: id), let error = hostMethods.clientReplied(connection, id: id, env, bytes) {
                    control.drop(connection, error)
                }
            case .cancel:
                cancel(connection, id)
            case .chunk, .credit:
                // Its call's input, or credit for its answer (Routing/Streams.swift); a call that
                // ended meanwhile is past caring.
                if let entry = connection.inFlight[id] {
                    if let why = router.fromCaller(kind, entry, env, bytes) { control.drop(connection, ErrorBody(.protocolViolation, why)) }
                } else if let early = connection.waitingStreams[id] {
                    switch router.whileWaiting(kind, early, env, bytes, client: connection) {
                    case .kept: break
                    case .violation(let why): control.drop(connection, ErrorBody(.protocolViolation, why))
                    case .overLimit(let error): router.refuseWaiting(connection, id, error)
                    }
                }
            default:
                connection.outstanding += 1
                // A deadline that is not one is said so, rather than the default put in its place.
                if env.badTimeout {
                    return outbox.answer(.client(connection, id: id), error: ErrorBody(.badRequest, "timeoutMs must be a whole number of milliseconds"))
                }
                handle(kind, env, bytes, origin: .client(connection, id: id))
            }
        }
    }

    /// Does one request, from a client of the socket or from the program the supervisor is
    /// embedded in (`ReplyOrigin.host`): both take the same requests, checked the same way.
    func handle(_ kind: MessageKind, _ env: Envelope, _ bytes: UnsafeRawBufferPointer, origin: ReplyOrigin) {
        // Only a call or an `open` carries bytes (bytes after the JSON without `attachments` end the
        // frame's reading already): on another request, attachments listed are a client's mistake,
        // said so (an empty list, or null, lists none). A type this socket does not take is said first.
        if kind != .call && kind != .open, Self.takes(kind), let range = env.attachments, Self.listsSome(bytes, range) {
            return outbox.answer(origin, error: ErrorBody(.badRequest, "\(kind.rawValue) carries no bytes, and this one has \"attachments\": only a call or an open does"))
        }
        switch kind {
        case .call, .open: callOrOpen(kind, env, bytes, origin)
        case .status: outbox.respond(origin) { self.statusAnswers.json(self.statusList()) }
        case .send: send(env, bytes, origin)
        case .restart:
            guard let target = Envelope.string(bytes, env.target) else {
                return outbox.answer(origin, error: ErrorBody(.badRequest, "restart needs a \"target\""))
            }
            guard table[target] != nil else {
                return outbox.answer(origin, error: ErrorBody(.notFound, "no plugin \(target) is installed"))
            }
            lifecycle.restartCommand(target) { [self] problem in
                if let problem {
                    outbox.answer(origin, error: ErrorBody(.unavailable, problem))
                } else {
                    outbox.respond(origin) { self.table[target].map { self.status(of: $0).json() } ?? Array("null".utf8) }
                }
            }
        case .install:
            guard let source = Envelope.string(bytes, env.uri), !source.isEmpty else {
                return outbox.answer(origin, error: ErrorBody(.badRequest, "install needs a \"uri\": an archive path or URL"))
            }
            installs.installCommand(origin, source: source, options: installOptions(env, bytes))
        case .update:
            installs.updateCommand(origin, options: installOptions(env, bytes))
        case .uninstall:
            guard let target = Envelope.string(bytes, env.target) else {
                return outbox.answer(origin, error: ErrorBody(.badRequest, "uninstall needs a \"target\""))
            }
            installs.uninstallCommand(origin, identifier: target)
        case .reload:
            lifecycle.reload { [self] (result: Result<ReloadSummary, ErrorBody>) in
                switch result {
                case .success(let summary): outbox.respond(origin) { try ProtocolJSON.encode(summary) }
                case .failure(let error): outbox.answer(origin, error: error)
                }
            }
        case .metrics:
            // The exposition as a JSON string: the CLI prints it as it is.
            outbox.respond(origin) { try ProtocolJSON.encode(String(decoding: shared.metrics.exposition(), as: UTF8.self)) }
        case .debugWedge:
            debugWedge(env, origin)
        case .events:
            guard case .client(let connection, let id) = origin else {
                return outbox.answer(origin, error: ErrorBody(.badRequest, "an embedded host follows events with PluginHost.events()"))
            }
            let plugin = Envelope.string(bytes, env.target)
            guard env.target == nil || plugin != nil else {
                return outbox.answer(origin, error: ErrorBody(.badRequest, "events' \"target\" is a plugin's identifier, a string (leave it out to follow every plugin)"))
            }
            events.follow(connection, id: id, plugin: plugin)
            outbox.respond(origin) { Array(#"{"following":true}"#.utf8) }
        case .link:
            guard case .client(let connection, _) = origin else {
                return outbox.answer(origin, error: ErrorBody(.badRequest, "an embedded host's calls go straight to the worker already"))
            }
            guard let target = Envelope.string(bytes, env.target), !target.isEmpty else {
                return outbox.answer(origin, error: ErrorBody(.badRequest, "link needs a \"target\""))
            }
            router.linkClient(connection, to: target, origin, handoff: handoff)
        case .provide:
            guard case .client(let connection, _) = origin else {
                return outbox.answer(origin, error: ErrorBody(.badRequest, "an embedded host provides methods with PluginHost.method(_:_:)"))
            }
            guard let name = Envelope.string(bytes, env.method), !name.isEmpty else {
                return outbox.answer(origin, error: ErrorBody(.badRequest, "provide needs a \"method\" string"))
            }
            hostMethods.provide(name, by: connection)
            outbox.respond(origin) { try ProtocolJSON.encode(["provided": name]) }
        case .upgrade:
            struct Params: Decodable { var binary: String? }
            var binary: String?
            if let p = env.params {
                do {
                    binary = try ProtocolJSON.decode(Params.self, from: UnsafeRawBufferPointer(rebasing: bytes[p])).binary
                } catch {
                    return outbox.answer(origin, error: ErrorBody(.badRequest, "upgrade's params must be {\"binary\": \"<absolute path>\"}: \(error)"))
                }
            }
            if let binary, !binary.hasPrefix("/") {
                return outbox.answer(origin, error: ErrorBody(.badRequest, "upgrade's binary must be an absolute path, not '\(binary)'"))
            }
            upgradeCommand(binary: binary, origin: origin)
        case .stop:
            outbox.respond(origin) { Array(#"{"stopping":true}"#.utf8) }
            lifecycle.shutdown(reason: "supervisor stop")
        default:
            outbox.answer(origin, error: ErrorBody(.badRequest, "'\(kind.rawValue)' is not a request this socket takes"))
        }
    }

    /// A client gives up a request (its task was cancelled): a call or open in flight is dropped at
    /// its plugin, which gets `cancel`; an `events` request stops. Nothing is answered.
    private func cancel(_ connection: ControlConnection, _ id: UInt64) {
        if let entry = connection.inFlight.removeValue(forKey: id) {
            connection.answered()
            shared.cancelInFlight([id: entry])
        } else if router.cancelWaiting(connection, id) {
            // It was waiting for its plugin: it never reaches it.
        } else if connection.following.contains(id) {
            events.unfollow(connection, id: id)
        }
    }

    /// The requests this socket takes besides calls and opens (`handle`'s cases).
    private static func takes(_ kind: MessageKind) -> Bool {
        [.status, .send, .restart, .install, .update, .uninstall, .reload, .metrics, .debugWedge, .events, .link, .provide, .upgrade, .stop].contains(kind)
    }

    /// Whether the `attachments` value at `range` lists any: not `null`, not `[]`.
    private static func listsSome(_ bytes: UnsafeRawBufferPointer, _ range: Range<Int>) -> Bool {
        let text = bytes[range].filter { ![UInt8(ascii: " "), UInt8(ascii: "\t"), UInt8(ascii: "\n"), UInt8(ascii: "\r")].contains($0) }
        return text != Array("null".utf8) && text != Array("[]".utf8)
    }

    private func callOrOpen(_ kind: MessageKind, _ env: Envelope, _ bytes: UnsafeRawBufferPointer, _ origin: ReplyOrigin) {
        let target: String
        switch router.validateRequest(kind, env, bytes) {
        case .failure(let error): return outbox.answer(origin, error: error)
        case .success(let t): target = t
        }
        if env.attachments != nil || env.tail != nil {
            return callWithBytes(kind, to: target, env, bytes, origin)
        }
        var attempts = Attempts.first
        if let afterLink = env.afterLink {
            let known: EndedLinks?
            switch origin {
            case .client(let connection, _): known = connection.endedLinks
            case .host: known = hostLinks?.endedLinks
            case .plugin, .local: known = nil
            }
            switch router.sentAgain(kind, to: target, env, bytes, afterLink, endedLinks: known) {
            case .failure(let error): return outbox.answer(origin, error: error)
            case .success(let counted): attempts = counted
            }
        }
        guard let error = router.forward(kind, to: target, from: nil, env: env, bytes: bytes, origin: origin, attempts: attempts) else { return }
        // Not installed: maybe the catalog offers it on demand.
        if table[target] == nil, installs.forwardOnDemand(kind, to: target, request: bytes, timeoutMs: env.timeoutMs, origin: origin) { return }
        outbox.answer(origin, error: error)
    }

    /// A client's call (or open) with bytes (docs/protocol.md "Bytes"): inline ones exactly as
    /// announced; larger ones named by the token of a `put` at the handoff socket, redeemed here
    /// and handed to the plugin's worker as descriptors. Refused with `badRequest`, naming why,
    /// when they are not what the request announces.
    private func callWithBytes(_ kind: MessageKind, to target: String, _ env: Envelope, _ bytes: UnsafeRawBufferPointer, _ origin: ReplyOrigin) {
        let payload: Payload
        var inProcess = false
        if case .host = origin { inProcess = true }
        switch Self.clientPayload(env, bytes, handoff: handoff, inProcess: inProcess) {
        case .failure(let refused): return outbox.answer(origin, error: refused)
        case .success(let p): payload = p
        }
        if let refused = router.oversized(payload) { return outbox.answer(origin, error: refused) }
        // As its plugin's worker reads it: descriptors as `"fd": true`, no tokens.
        let request = Attachments.replacing(in: bytes, env, with: Attachments.onTheWire(payload.list))
        request.withUnsafeBytes { raw in
            let body = UnsafeRawBufferPointer(rebasing: raw[Frame.headerSize...])
            guard let again = try? Envelope.parse(body, maxDepth: config.maxJSONDepth) else {
                return outbox.answer(origin, error: ErrorBody(.badRequest, "the request could not be read again with its bytes"))
            }
            let moved = Payload(list: payload.list, descriptors: payload.take(), tail: again.tail)
            guard let error = router.forward(kind, to: target, from: nil, env: again, bytes: body, origin: origin, payload: moved) else { return }
            outbox.answer(origin, error: error)
        }
    }

    /// The bytes a client's request announces, checked and taken: inline ones from its tail, tokens
    /// redeemed at `handoff` (each good once); `inProcess` (the embedding program): descriptors by
    /// their number in this process, a copy taken and checked. What was taken is closed when one fails.
    static func clientPayload(_ env: Envelope, _ bytes: UnsafeRawBufferPointer, handoff: LinkHandoff?, inProcess: Bool = false) -> Result<Payload, ErrorBody> {
        guard let range = env.attachments else {
            return .failure(ErrorBody(.badRequest, "data after the request's JSON object, and no attachments announce it"))
        }
        var list: [Attachment]
        do { list = try Attachments.read(bytes, range) } catch { return .failure(ErrorBody(.badRequest, "the request's attachments: \(error)")) }
        let inline = Attachments.inlineCount(list)
        guard inline == env.tail?.count ?? 0 else {
            return .failure(ErrorBody(.badRequest, "the request's attachments announce \(inline) inline bytes and \(env.tail?.count ?? 0) came"))
        }
        var taken: [Int32] = []
        for i in list.indices {
            switch list[i].place {
            case .inline: continue
            case .descriptor(let fd) where inProcess && fd >= 0:
                let copy = fcntl(fd, F_DUPFD_CLOEXEC, 3)
                guard copy >= 0, sp_bytes_check(copy, UInt64(list[i].length)) == 0 else {
                    if copy >= 0 { close(copy) }
                    for fd in taken { close(fd) }
                    return .failure(ErrorBody(.badRequest, "attachment \(i) (descriptor \(fd)) is not a sealed memfd of \(list[i].length) bytes"))
                }
                taken.append(copy)
                list[i].place = .descriptor(copy)
            case .descriptor:
                for fd in taken { close(fd) }
                return .failure(ErrorBody(.badRequest, "attachment \(i) is passed as a descriptor, which the control socket cannot carry: hand the bytes in with {\"put\": <length>} at the handoff socket and name its token"))
            case .token(let token):
                guard let handoff, let fd = handoff.take(token, length: list[i].length) else {
                    for fd in taken { close(fd) }
                    return .failure(ErrorBody(.badRequest, "attachment \(i): no bytes of \(list[i].length) were handed in with that token (unknown, already used, expired after \(LinkHandoff.tokenLifetimeNanoseconds / 1_000_000_000) s, or of another length)"))
                }
                taken.append(fd)
                list[i].place = .descriptor(fd)
            }
        }
        return .success(Payload(list: list, descriptors: taken, tail: env.tail))
    }

    /// Debug builds: holds the event loop for `timeoutMs` (at most 60 s), as a wedged loop would,
    /// after answering. Tests of the systemd watchdog use it. Release builds refuse it.
    private func debugWedge(_ env: Envelope, _ origin: ReplyOrigin) {
        #if DEBUG
        let ms = min(env.timeoutMs ?? 1000, 60_000)
        outbox.respond(origin) { Array(#"{"wedged":true}"#.utf8) }
        logger.warning("debugWedge: holding the event loop for \(ms) ms")
        loop.execute { usleep(UInt32(ms) * 1000) }
        #else
        outbox.answer(origin, error: ErrorBody(.badRequest, "debugWedge exists only in debug builds"))
        #endif
    }

    func send(_ env: Envelope, _ bytes: UnsafeRawBufferPointer, _ origin: ReplyOrigin) {
        let allowed: [EventName] = [.memoryWarning, .background, .foreground]
        guard let name = Envelope.string(bytes, env.name) else {
            return outbox.answer(origin, error: ErrorBody(.badRequest, "send needs a \"name\" string: \(allowed.map(\.rawValue).joined(separator: ", "))"))
        }
        guard let event = EventName(rawValue: name), allowed.contains(event) else {
            return outbox.answer(origin, error: ErrorBody(.badRequest, "cannot send '\(name)'; events that can be sent: \(allowed.map(\.rawValue).joined(separator: ", "))"))
        }
        let only = Envelope.string(bytes, env.target)
        if let only, table[only] == nil {
            return outbox.answer(origin, error: ErrorBody(.notFound, "no plugin \(only) is installed"))
        }
        // An event for one plugin that cannot take it now waits in the plugin's queue as a call does
        // (the route's rule: an inactive plugin is started for it, SPEC §16; one coming up, or
        // whose worker is being stopped, idle or replaced, is waited for), and is sent when its
        // turn comes (`Router.forward`). One sent to every plugin goes to those running: the
        // others have no state to tell. A failed or stopped one is named in `failed`.
        if let only, let record = table[only] {
            switch Route.decide(record.routeTarget, named: only, shuttingDown: isShuttingDown) {
            case .wait, .activate:
                if let error = router.forward(.send, to: only, from: nil, env: env, bytes: bytes, origin: origin) {
                    outbox.answer(origin, error: error)
                }
                return
            case .refuse(let error):
                return outbox.respond(origin) { try ProtocolJSON.encode(SendOutcome(event: name, delivered: [], failed: [only: error.description])) }
            case .forward:
                break
            }
        }
        shared.broadcast(event, only: only) { [self] delivered, failed in
            outbox.respond(origin) { try ProtocolJSON.encode(SendOutcome(event: name, delivered: delivered, failed: failed)) }
        }
    }

    private func installOptions(_ env: Envelope, _ bytes: UnsafeRawBufferPointer) -> InstallOptions {
        guard let p = env.params else { return InstallOptions() }
        return (try? ProtocolJSON.decode(InstallOptions.self, from: UnsafeRawBufferPointer(rebasing: bytes[p]))) ?? InstallOptions()
    }

    /// `status`: every plugin in start order (SPEC §6).
    func statusList() -> [PluginStatus] {
        table.inOrder.map(status(of:))
    }

    /// One plugin as `status` shows it.
    func status(of r: PluginRecord) -> PluginStatus {
        var status = PluginStatus(
            identifier: r.identifier, version: r.manifest.version.description, state: r.phase.shown,
            pid: r.instance?.pid, restarts: r.restarts, lastExit: r.lastExit, dependencies: r.dependencyIDs,
            variant: r.variant ?? r.library, sandbox: r.instance?.hello?.sandbox ?? [],
            sandboxMissing: r.instance.map { $0.hello?.sandboxMissing ?? [] }, error: r.problem ?? r.bundleProblem,
            timings: r.instance.map(\.timings), sandboxDenials: r.sandboxDenials, lastError: r.problem ?? r.bundleProblem ?? r.lastError,
            updating: r.successor.map { .init(version: $0.instance.manifest.version.description, pid: $0.instance.pid) },
            debug: config.isDebugged(r.identifier) ? true : nil,
            workerStart: r.instance.map { $0.forked ? "fork-server" : "exec" },
            workerStartProblem: r.instance.flatMap { $0.startProblem },
            links: r.instance.flatMap { $0.linksOut.isEmpty ? nil : $0.linksOut.keys.sorted() })
        status.supervisorVersion = ProductVersion.current
        status.standbyPid = r.standby?.instance.pid
        return status
    }
}
