import Logging
import NIOCore
import PluginProtocol

/// Routing: frames from workers and clients, forwarded without decoding their payloads.
extension Supervisor {
    /// One frame from a worker.
    func workerFrame(_ instance: WorkerInstance, _ frame: ByteBuffer) {
        // A worker being killed (protocol violation, watchdog, ...) has nothing more to say.
        guard instance.killReason == nil || instance.stopRequested else { return }
        frame.withUnsafeReadableBytes { bytes in
            let env: Envelope
            do {
                env = try Envelope.parse(bytes, maxDepth: config.maxJSONDepth)
            } catch {
                return protocolViolation(instance, "invalid frame: \(error)")
            }
            guard let kind = env.kind else {
                return protocolViolation(instance, "unknown message type '\(env.typeName ?? "(none)")'")
            }
            if env.badID { return protocolViolation(instance, "\(kind.rawValue) with an id that is not an unsigned integer") }
            if !instance.helloReceived, kind != .hello, kind != .exit, kind != .log {
                return protocolViolation(instance, "\(kind.rawValue) before hello")
            }
            switch kind {
            case .hello:
                guard !instance.helloReceived else { return protocolViolation(instance, "a second hello") }
                let hello: HelloMessage
                do { hello = try ProtocolJSON.decode(HelloMessage.self, from: bytes) } catch {
                    return protocolViolation(instance, "malformed hello: \(error)")
                }
                guard hello.protocol == Frame.protocolVersion else {
                    return protocolViolation(instance, "hello speaks protocol \(hello.protocol), this supervisor speaks \(Frame.protocolVersion)")
                }
                guard hello.plugin == instance.identifier else {
                    return protocolViolation(instance, "hello names plugin \(hello.plugin), expected \(instance.identifier)")
                }
                helloReceived(instance, hello)
            case .reply:
                guard let id = env.id else { return protocolViolation(instance, "reply without an id") }
                guard let request = instance.pending.removeValue(forKey: id) else {
                    // Late replies to requests that timed out or were cancelled are expected; others are not.
                    if id < instance.nextID { return }
                    return protocolViolation(instance, "reply to id \(id), which was never asked")
                }
                forwardReply(request.origin, env, bytes)
            case .pong:
                if let ping = instance.outstandingPing, ping.id == env.id {
                    instance.outstandingPing = nil
                }
            case .call, .open:
                pluginRequest(instance, kind, env, bytes)
            case .log:
                guard admitLog(instance) else { return }
                guard let log = try? ProtocolJSON.decode(LogMessage.self, from: bytes) else {
                    return protocolViolation(instance, "malformed log message")
                }
                var meta: Logger.Metadata = ["plugin": "\(instance.identifier)"]
                for (k, v) in log.metadata ?? [:] { meta[k] = "\(v)" }
                logger.log(level: Logger.Level(rawValue: log.level) ?? .info, "\(log.message)", metadata: meta)
            case .exit:
                instance.exitNotice = try? ProtocolJSON.decode(ExitNotice.self, from: bytes)
                if let notice = instance.exitNotice {
                    logger.log(level: notice.reason == "terminated" ? .notice : .error, "\(notice.message)",
                               metadata: ["plugin": "\(instance.identifier)", "reason": "\(notice.reason)"])
                }
            default:
                protocolViolation(instance, "a worker may not send \(kind.rawValue)")
            }
        }
    }

    /// At most `logsPerSecond` log messages a second are written; past `floodLogsPerSecond` the
    /// worker is flooding and is dropped.
    func admitLog(_ instance: WorkerInstance) -> Bool {
        let now = NIODeadline.now()
        if now - instance.logWindowStart >= .seconds(1) {
            if instance.logsDropped > 0 {
                logger.warning("dropped \(instance.logsDropped) log messages over \(Self.logsPerSecond)/s", metadata: ["plugin": "\(instance.identifier)"])
            }
            instance.logWindowStart = now
            instance.logsInWindow = 0
            instance.logsDropped = 0
        }
        instance.logsInWindow += 1
        if instance.logsInWindow > Self.floodLogsPerSecond {
            protocolViolation(instance, "flooding: more than \(Self.floodLogsPerSecond) log messages in one second")
            return false
        }
        if instance.logsInWindow > Self.logsPerSecond {
            instance.logsDropped += 1
            return false
        }
        return true
    }

    static let logsPerSecond = 200
    static let floodLogsPerSecond = 20_000

    /// Drops a worker that broke the protocol: it is killed and its exit recorded as `protocolViolation`.
    func protocolViolation(_ instance: WorkerInstance, _ message: String) {
        guard instance.killReason == nil else { return }
        kill(instance, reason: "protocolViolation", message: message)
        instance.channel?.close(promise: nil)
    }

    /// Sends the answer to `origin` as a reply frame carrying the worker's raw result or error.
    func forwardReply(_ origin: ReplyOrigin, _ env: Envelope, _ bytes: UnsafeRawBufferPointer) {
        switch origin {
        case .client(let connection, let id):
            connection.outstanding -= 1
            connection.inFlight[id] = nil
            guard !connection.closed else { return }
            write(replyFrame(id: id, env, bytes), to: connection.channel)
        case .plugin(let caller, let id):
            caller.outgoing[id] = nil
            guard let channel = caller.channel else { return }
            write(replyFrame(id: id, env, bytes), to: channel)
        case .local(let done):
            if let e = env.error {
                let body = (try? ProtocolJSON.decode(ErrorBody.self, from: UnsafeRawBufferPointer(rebasing: bytes[e])))
                    ?? ErrorBody(.pluginError, "malformed error object")
                done(.failure(body))
            } else {
                done(.success(env.result.map { Array(bytes[$0]) }))
            }
        }
    }

    func replyFrame(id: UInt64, _ env: Envelope, _ bytes: UnsafeRawBufferPointer) -> [UInt8] {
        var b = FrameBuilder(kind: .reply, capacity: bytes.count)
        b.uint("id", id)
        if let e = env.error {
            b.raw("error", UnsafeRawBufferPointer(rebasing: bytes[e]))
        } else if let r = env.result {
            b.raw("result", UnsafeRawBufferPointer(rebasing: bytes[r]))
        } else {
            b.raw("result", Array("null".utf8))
        }
        return b.finish()
    }

    /// Answers `origin` with an error made by the supervisor.
    func answer(_ origin: ReplyOrigin, error: ErrorBody) {
        switch origin {
        case .client(let connection, let id):
            connection.outstanding -= 1
            connection.inFlight[id] = nil
            guard !connection.closed else { return }
            write(Self.errorFrame(id: id, error), to: connection.channel)
        case .plugin(let caller, let id):
            caller.outgoing[id] = nil
            guard let channel = caller.channel else { return }
            write(Self.errorFrame(id: id, error), to: channel)
        case .local(let done):
            done(.failure(error))
        }
    }

    static func errorFrame(id: UInt64, _ error: ErrorBody) -> [UInt8] {
        var b = FrameBuilder(kind: .reply)
        b.uint("id", id)
        b.error(code: error.code, error.message)
        return b.finish()
    }

    /// The timeout for a request to `record`: the request's own, else the plugin's, else the default.
    func timeout(for record: PluginRecord, requested: UInt64?) -> Int {
        if let requested, requested > 0 { return Int(min(requested, 24 * 3_600_000)) }
        return record.manifest.limits.callTimeoutMs ?? config.callTimeoutMs
    }

    /// Sends a `call` or `open` to the plugin `target`, answering `origin` when it replies.
    /// Returns an error instead when the target cannot take it now.
    func forward(_ kind: MessageKind, to target: String, from caller: String?, env: Envelope, bytes: UnsafeRawBufferPointer,
                 origin: ReplyOrigin) -> ErrorBody? {
        guard let record = records[target] else {
            return ErrorBody(.notFound, "no plugin \(target) is installed")
        }
        guard record.state == .running, let instance = record.instance, let channel = instance.channel else {
            return ErrorBody(.unavailable, "\(target) is \(record.state.shown)" + (record.problem.map { ": \($0)" } ?? ""))
        }
        // Back-pressure: a plugin that is not reading its socket gets no more queued for it.
        guard channel.isWritable else {
            return ErrorBody(.unavailable, "\(target) is not keeping up: its socket buffer is full")
        }
        let id = instance.nextID
        instance.nextID += 1
        var b = FrameBuilder(kind: kind, capacity: bytes.count + 64)
        b.uint("id", id)
        let what: String
        if kind == .call {
            b.raw("target", UnsafeRawBufferPointer(rebasing: bytes[env.target!]))
            b.raw("method", UnsafeRawBufferPointer(rebasing: bytes[env.method!]))
            if let p = env.params { b.raw("params", UnsafeRawBufferPointer(rebasing: bytes[p])) }
            what = "call"
        } else {
            b.raw("uri", UnsafeRawBufferPointer(rebasing: bytes[env.uri!]))
            what = "open"
        }
        if let caller { b.string("from", caller) }
        let deadline = NIODeadline.now() + .milliseconds(Int64(timeout(for: record, requested: env.timeoutMs)))
        instance.pending[id] = PendingRequest(origin: origin, deadline: deadline, what: what)
        switch origin {
        case .client(let connection, let clientID): connection.inFlight[clientID] = (instance, id)
        case .plugin(let caller, let callerID): caller.outgoing[callerID] = (instance, id)
        case .local: break
        }
        write(b.finish(), to: channel)
        return nil
    }

    /// The caller of requests in flight went away (client disconnected, calling worker died):
    /// drop them at their callees and tell each callee to `cancel`.
    func cancelInFlight(_ entries: [UInt64: (callee: WorkerInstance, id: UInt64)]) {
        for (_, entry) in entries {
            guard entry.callee.pending.removeValue(forKey: entry.id) != nil, let channel = entry.callee.channel else { continue }
            var cancel = FrameBuilder(kind: .cancel)
            cancel.uint("id", entry.id)
            write(cancel.finish(), to: channel)
        }
        flushDirty()
    }

    /// Checks a `call`/`open` request's fields; returns the target plugin's identifier.
    func validateRequest(_ kind: MessageKind, _ env: Envelope, _ bytes: UnsafeRawBufferPointer) -> Result<String, ErrorBody> {
        if kind == .call {
            guard let target = Envelope.string(bytes, env.target), !target.isEmpty else {
                return .failure(ErrorBody(.badRequest, "call needs a \"target\" string"))
            }
            guard Envelope.string(bytes, env.method) != nil else {
                return .failure(ErrorBody(.badRequest, "call needs a \"method\" string"))
            }
            return .success(target)
        }
        guard let text = Envelope.string(bytes, env.uri) else {
            return .failure(ErrorBody(.badRequest, "open needs a \"uri\" string"))
        }
        guard let uri = PluginURI(text) else {
            return .failure(ErrorBody(.badRequest, "'\(text)' is not a plugin://<identifier>/<path> URI"))
        }
        return .success(uri.identifier)
    }

    /// A plugin calls another plugin or opens a URI: allowed only towards its declared dependencies.
    func pluginRequest(_ instance: WorkerInstance, _ kind: MessageKind, _ env: Envelope, _ bytes: UnsafeRawBufferPointer) {
        guard let id = env.id else { return protocolViolation(instance, "\(kind.rawValue) without an id") }
        guard let channel = instance.channel else { return }
        let origin = ReplyOrigin.plugin(instance, id: id)
        let target: String
        switch validateRequest(kind, env, bytes) {
        case .failure(let error): return write(Self.errorFrame(id: id, error), to: channel)
        case .success(let t): target = t
        }
        guard let caller = records[instance.identifier], caller.dependencyIDs.contains(target) else {
            return write(Self.errorFrame(id: id, ErrorBody(.denied, "\(instance.identifier) may only call its declared dependencies, and \(target) is not one")), to: channel)
        }
        if let error = forward(kind, to: target, from: instance.identifier, env: env, bytes: bytes, origin: origin) {
            write(Self.errorFrame(id: id, error), to: channel)
        }
    }

    /// Sends a lifecycle event; `done` gets the plugin's answer (or a timeout / unavailable).
    func sendEvent(_ record: PluginRecord, _ name: EventName, payload: [UInt8]? = nil, timeoutMs: Int? = nil,
                   _ done: @escaping (Result<[UInt8]?, ErrorBody>) -> Void) {
        guard let instance = record.instance, let channel = instance.channel, instance.helloReceived else {
            done(.failure(ErrorBody(.unavailable, "\(record.identifier) is \(record.state.shown)")))
            return
        }
        let id = instance.nextID
        instance.nextID += 1
        var b = FrameBuilder(kind: .event)
        b.uint("id", id)
        b.string("name", name.rawValue)
        if let payload { b.raw("payload", payload) }
        let ms = timeoutMs ?? record.manifest.limits.callTimeoutMs ?? config.callTimeoutMs
        instance.pending[id] = PendingRequest(origin: .local(done), deadline: .now() + .milliseconds(Int64(ms)), what: "event \(name.rawValue)")
        write(b.finish(), to: channel)
    }

    /// Sends `name` to every running plugin (or one); `done` gets who acknowledged and who did not.
    func broadcast(_ name: EventName, only: String? = nil, _ done: @escaping ([String], [String: String]) -> Void) {
        let targets = order.compactMap { records[$0] }.filter { $0.state == .running && (only == nil || $0.identifier == only) }
        var delivered: [String] = []
        var failed: [String: String] = [:]
        var remaining = targets.count
        if remaining == 0 { done([], [:]); return }
        for record in targets {
            sendEvent(record, name) { result in
                switch result {
                case .success: delivered.append(record.identifier)
                case .failure(let e): failed[record.identifier] = e.description
                }
                remaining -= 1
                if remaining == 0 { done(delivered.sorted(), failed) }
            }
        }
        flushDirty()
    }
}
