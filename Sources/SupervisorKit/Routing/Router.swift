import Bundles
import Logging
import NIOCore
import PluginProtocol
import Protocol

/// Moves requests and answers between CLI clients, plugins and the supervisor itself, without
/// decoding payloads: ids are rewritten, payload bytes are copied untouched into the outgoing frame.
/// Every request sent to a worker is in that worker's `pending` table until exactly one of these
/// settles it: its reply (`deliverReply`), its deadline (`expire`), its worker's end (`failPending`),
/// or its caller going away (`cancelInFlight`).
final class Router: SupervisorComponent {
    unowned let engine: Engine
    /// The rules of a forwarded request (timeout, frame, trace context: SPEC §3), shared with the
    /// workers that forward over peer links; its trace ids are the loop's.
    private var hop = CallHop()
    /// Whether each answered request is logged (debug level), with its trace id and duration.
    let logCalls: Bool
    /// The last peer link's number (PeerLinks.swift).
    var nextLinkNumber: UInt64 = 0

    init(_ engine: Engine) {
        self.engine = engine
        logCalls = engine.logger.logLevel <= .debug
    }

    static let logsPerSecond = 200
    static let floodLogsPerSecond = 20_000

    // MARK: Requests to plugins

    /// The timeout for a request to `record` (`CallHop.timeoutMs`): the request's own, else the
    /// plugin's, else the default; a day for a plugin run with `--debug`.
    func timeout(for record: PluginRecord, requested: UInt64?) -> Int {
        if config.isDebugged(record.identifier) { return SupervisorConfig.longestTimeoutMs }
        return CallHop.timeoutMs(requested: requested, otherwise: record.manifest.limits.callTimeoutMs ?? config.callTimeoutMs)
    }

    /// Sends a `call` or `open` to the plugin `target`, answering `origin` when it replies.
    /// Returns an error instead when the target cannot take it now.
    /// A plugin that is coming up or draining for a planned stop gets it later (Routing/Queueing.swift, State/WaitQueue.swift).
    /// `deadline`: a queued request's own, when it is finally forwarded.
    func forward(_ kind: MessageKind, to target: String, from caller: String?, env: Envelope, bytes: UnsafeRawBufferPointer,
                 origin: ReplyOrigin, deadline: NIODeadline? = nil) -> ErrorBody? {
        guard let record = table[target] else {
            return ErrorBody(.notFound, "no plugin \(target) is installed")
        }
        let metrics = callMetrics(of: record)
        guard record.phase == .running, let instance = record.instance, !instance.phase.stopRequested, let channel = instance.channel else {
            // Not now: coming up or draining, it waits; failed or stopped, it fails.
            if mustWait(record) {
                return enqueue(kind, for: record, from: caller, env: env, bytes: bytes, origin: origin)
            }
            metrics.count(.unavailable)
            if lifecycle.isShuttingDown { return ErrorBody(.unavailable, "\(target) is stopping: the supervisor is shutting down") }
            return ErrorBody(.unavailable, "\(target) is \(record.phase.shown)" + (record.problem.map { ": \($0)" } ?? ""))
        }
        // Back-pressure: a plugin that is not reading its socket gets no more queued for it.
        guard channel.isWritable else {
            metrics.count(.unavailable)
            return ErrorBody(.unavailable, "\(target) is not keeping up: its socket buffer is full")
        }
        let id = instance.takeID()
        // Written straight into the buffer that is sent, the request's bytes copied untouched.
        let buffer = channel.allocator.buffer(capacity: CallHop.frameCapacity(forwarding: bytes.count, from: caller) + 48)
        let (frame, trace) = hop.forward(kind, id: id, from: caller, env, in: bytes, into: buffer)
        let now = NIODeadline.now()
        let deadline = deadline ?? now + .milliseconds(Int64(timeout(for: record, requested: env.timeoutMs)))
        let log = logCalls
            ? CallLog(label: kind == .call ? "\(target).\(Envelope.string(bytes, env.method) ?? "")" : Envelope.string(bytes, env.uri) ?? "", trace: CallTrace(trace))
            : nil
        instance.pending[id] = PendingRequest(origin: origin, deadline: deadline, what: kind == .call ? .call : .open,
                                              call: CallFacts(started: now, metrics: metrics, log: log))
        switch origin {
        case .client(let connection, let clientID): connection.inFlight[clientID] = (instance, id)
        case .plugin(let caller, let callerID): caller.outgoing[callerID] = (instance, id)
        case .host(let request): request.inFlight = (instance, id)
        case .local: break
        }
        outbox.write(frame, to: channel)
        // A plugin's call has reached its dependency (now, or from the wait queue once it runs):
        // the next ones may go over a peer link.
        if kind == .call, case .plugin(let caller, _) = origin { offerLink(from: caller, to: target) }
        return nil
    }

    /// `record`'s call counters, looked up in the registry on its first call and kept on the record
    /// (read only when it is there: no write on the call path).
    @inline(__always)
    private func callMetrics(of record: PluginRecord) -> CallMetrics {
        if let known = record.callMetrics { return known }
        let made = engine.metrics.calls(record.identifier)
        record.callMetrics = made
        return made
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
        guard let id = env.id else { return lifecycle.protocolViolation(instance, "\(kind.rawValue) without an id") }
        guard let channel = instance.channel else { return }
        let target: String
        switch validateRequest(kind, env, bytes) {
        case .failure(let error): return outbox.write(errorFrame(id: id, error, for: channel), to: channel)
        case .success(let t): target = t
        }
        // A method of the program the supervisor runs in (SPEC §12): its own permission, not a dependency.
        if kind == .call, target == HostMethods.target {
            return engine.hostMethods.call(from: instance, id: id, env, bytes)
        }
        // The caller's own version decides (during an update, the old and the new one may differ).
        guard instance.manifest.dependencies.contains(where: { $0.identifier == target }) else {
            if let callee = table[target] { callMetrics(of: callee).count(.denied) }
            let denied = ErrorBody(.denied, "\(instance.identifier) may only call its declared dependencies, and \(target) is not one")
            return outbox.write(errorFrame(id: id, denied, for: channel), to: channel)
        }
        if let error = forward(kind, to: target, from: instance.identifier, env: env, bytes: bytes, origin: .plugin(instance, id: id)) {
            outbox.write(errorFrame(id: id, error, for: channel), to: channel)
        }
    }

    // MARK: Settling requests

    /// A worker answered request `id`: the answer goes to whoever asked.
    func deliverReply(from instance: WorkerInstance, id: UInt64, _ env: Envelope, _ bytes: UnsafeRawBufferPointer) -> Bool {
        guard let request = instance.pending.removeValue(forKey: id) else { return false }
        defer { callLeft(instance) }
        settled(request, env.error == nil ? .ok : .error, by: instance)
        switch request.origin {
        case .client(let connection, let clientID):
            connection.answered()
            connection.inFlight[clientID] = nil
            guard !connection.closed else { return true }
            outbox.write(replyFrame(id: clientID, env, bytes, for: connection.channel), to: connection.channel)
        case .plugin(let caller, let callerID):
            caller.outgoing[callerID] = nil
            guard let channel = caller.channel else { return true }
            outbox.write(replyFrame(id: callerID, env, bytes, for: channel), to: channel)
        case .local(let done):
            if let e = env.error {
                done(.failure(Self.errorBody(bytes[e])))
            } else {
                done(.success(env.result.map { Array(bytes[$0]) }))
            }
        case .host(let request):
            if let e = env.error {
                request.settle(.failure(Self.errorBody(bytes[e])))
            } else {
                request.settle(.success(env.result.map { Array(bytes[$0]) } ?? Array("null".utf8)))
            }
        }
        return true
    }

    /// A reply's `error` object; a malformed one is the plugin's error all the same.
    static func errorBody(_ bytes: Slice<UnsafeRawBufferPointer>) -> ErrorBody {
        (try? ProtocolJSON.decode(ErrorBody.self, from: UnsafeRawBufferPointer(rebasing: bytes)))
            ?? ErrorBody(.pluginError, "malformed error object")
    }

    /// Counts an answered request from a client or plugin, and logs it at debug level with its
    /// trace context (SPEC §10).
    @inline(__always)
    private func settled(_ request: PendingRequest, _ outcome: CallHop.Outcome, by instance: WorkerInstance) {
        guard let call = request.call else { return }
        let nanoseconds = (NIODeadline.now() - call.started).nanoseconds
        call.metrics.record(outcome, nanoseconds: nanoseconds)
        if let log = call.log {
            let ms = Double(nanoseconds) / 1_000_000
            logger.debug("\(request.what) \(log.label): \(outcome.label) in \(ms) ms", metadata: [
                "plugin": "\(instance.identifier)", "trace_id": "\(log.trace.traceIDText)",
                "span_id": "\(log.trace.spanIDText)", "duration_ms": "\(ms)",
            ])
        }
    }

    private func replyFrame(id: UInt64, _ env: Envelope, _ bytes: UnsafeRawBufferPointer, for channel: Channel) -> ByteBuffer {
        var frame = outbox.encoder(.reply, for: channel, capacity: bytes.count)
        frame.uint("id", id)
        frame.answer(of: env, in: bytes)
        return frame.finish()
    }

    /// Answers `origin` with an error made by the supervisor.
    func answer(_ origin: ReplyOrigin, error: ErrorBody) {
        switch origin {
        case .client(let connection, let id):
            connection.answered()
            connection.inFlight[id] = nil
            guard !connection.closed else { return }
            outbox.write(errorFrame(id: id, error, for: connection.channel), to: connection.channel)
        case .plugin(let caller, let id):
            caller.outgoing[id] = nil
            guard let channel = caller.channel else { return }
            outbox.write(errorFrame(id: id, error, for: channel), to: channel)
        case .host(let request):
            request.settle(.failure(error))
        case .local(let done):
            done(.failure(error))
        }
    }

    /// Answers a CLI request with a result made by the supervisor (`make` encodes it).
    func respond(_ origin: ReplyOrigin, _ make: () throws -> [UInt8]) {
        do {
            let result = try make()
            if case .host(let request) = origin { return request.settle(.success(result)) }
            guard case .client(let connection, let id) = origin else { return }
            connection.answered()
            guard !connection.closed else { return }
            var frame = outbox.encoder(.reply, for: connection.channel, capacity: result.count)
            frame.uint("id", id)
            frame.raw("result", result)
            outbox.write(frame.finish(), to: connection.channel)
        } catch {
            answer(origin, error: ErrorBody(.badRequest, "\(error)"))
        }
    }

    func errorFrame(id: UInt64, _ error: ErrorBody, for channel: Channel) -> ByteBuffer {
        var frame = outbox.encoder(.reply, for: channel, capacity: error.message.utf8.count + 32)
        frame.uint("id", id)
        frame.error(code: error.code, error.message)
        return frame.finish()
    }

    /// Fails every request in flight to `instance` with `unavailable`.
    func failPending(_ instance: WorkerInstance, because reason: String) {
        let pending = instance.pending
        instance.pending = [:]
        for (_, request) in pending.sorted(by: { $0.key < $1.key }) {
            settled(request, .unavailable, by: instance)
            answer(request.origin, error: ErrorBody(.unavailable, "\(reason) before answering \(request.what)"))
        }
    }

    /// Fails requests whose deadline has passed with `timeout`, and tells their plugin to `cancel`.
    /// Every live worker counts, whatever its role (an update's new version answering `startup`,
    /// an old one draining).
    func expire(now: NIODeadline) {
        for instance in table.liveWorkers where !instance.pending.isEmpty {
            let expired = instance.pending.filter { $0.value.deadline <= now }.keys.sorted()
            for id in expired {
                guard let request = instance.pending.removeValue(forKey: id) else { continue }
                settled(request, .timeout, by: instance)
                answer(request.origin, error: ErrorBody(.timeout, "\(instance.identifier) did not answer \(request.what) in time"))
                // An unlink is the worker's own business, not its plugin's: nothing to cancel there.
                if request.what.cancelledOnTimeout { sendCancel(id, to: instance) }
            }
            if !expired.isEmpty { callLeft(instance) }
        }
    }

    /// The caller of requests in flight went away (client disconnected, calling worker died):
    /// drop them at their callees and tell each callee to `cancel`.
    func cancelInFlight(_ entries: [UInt64: (callee: WorkerInstance, id: UInt64)]) {
        for (_, entry) in entries where entry.callee.pending.removeValue(forKey: entry.id) != nil {
            sendCancel(entry.id, to: entry.callee)
            callLeft(entry.callee)
        }
    }

    /// A call inside `instance` was settled (answered, timed out, given up by its caller) or a
    /// link to it given back: a worker draining for its stop goes on once the last one is.
    @inline(__always)
    func callLeft(_ instance: WorkerInstance) {
        if case .draining = instance.phase, !instance.hasCallsInside { lifecycle.drained(instance) }
    }

    private func sendCancel(_ id: UInt64, to instance: WorkerInstance) {
        guard let channel = instance.channel else { return }
        var frame = outbox.encoder(.cancel, for: channel)
        frame.uint("id", id)
        outbox.write(frame.finish(), to: channel)
    }

    // MARK: Events

    /// Sends a lifecycle event; `done` gets the plugin's answer (or a timeout / unavailable).
    /// `payload` fills in the event's `payload` member, if any.
    func sendEvent(_ record: PluginRecord, _ name: EventName, timeoutMs: Int? = nil,
                   payload: ((inout FrameEncoder<ByteBuffer>) -> Void)? = nil,
                   _ done: @escaping (Result<[UInt8]?, ErrorBody>) -> Void) {
        guard let instance = record.instance, instance.channel != nil, instance.hello != nil else {
            done(.failure(ErrorBody(.unavailable, "\(record.identifier) is \(record.phase.shown)")))
            return
        }
        sendEvent(to: instance, name, timeoutMs: timeoutMs, payload: payload, done)
    }

    /// Sends a lifecycle event to one worker (an update's new or old version, or the current one).
    func sendEvent(to instance: WorkerInstance, _ name: EventName, timeoutMs: Int? = nil,
                   payload: ((inout FrameEncoder<ByteBuffer>) -> Void)? = nil,
                   _ done: @escaping (Result<[UInt8]?, ErrorBody>) -> Void) {
        guard let channel = instance.channel, instance.hello != nil else {
            done(.failure(ErrorBody(.unavailable, "the worker of \(instance.identifier) (pid \(instance.pid)) is not connected")))
            return
        }
        let id = instance.takeID()
        var frame = outbox.encoder(.event, for: channel)
        frame.uint("id", id)
        frame.string("name", name.rawValue)
        payload?(&frame)
        let ms = config.isDebugged(instance.identifier) ? SupervisorConfig.longestTimeoutMs
            : timeoutMs ?? instance.manifest.limits.callTimeoutMs ?? config.callTimeoutMs
        instance.pending[id] = PendingRequest(origin: .local(done), deadline: .now() + .milliseconds(Int64(ms)), what: .event(name))
        outbox.write(frame.finish(), to: channel)
    }

    /// Sends `name` to every running plugin (or one); `done` gets who acknowledged and who did not.
    func broadcast(_ name: EventName, only: String? = nil, _ done: @escaping ([String], [String: String]) -> Void) {
        let targets = table.inOrder.filter { $0.phase == .running && (only == nil || $0.identifier == only) }
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
    }

    func broadcastFromSignal(_ event: EventName) {
        guard !lifecycle.isShuttingDown else { return }
        broadcast(event) { [self] delivered, failed in
            let missing = failed.isEmpty ? "" : "; not by \(failed.keys.sorted().joined(separator: ", "))"
            logger.info("\(event.rawValue) acknowledged by \(delivered.count) plugin(s)\(missing)")
        }
    }

    /// Sends a progress frame to a waiting CLI (long requests: installs, updates).
    func sendProgress(_ origin: ReplyOrigin, stage: String, done: Int64, total: Int64, message: String? = nil) {
        if case .host(let request) = origin {
            request.progress?(ProgressReport(stage: stage, done: max(0, done), total: max(0, total), message: message))
            return
        }
        guard case .client(let connection, let id) = origin, !connection.closed else { return }
        var frame = outbox.encoder(.progress, for: connection.channel)
        frame.uint("id", id)
        frame.string("stage", stage)
        frame.uint("done", UInt64(max(0, done)))
        frame.uint("total", UInt64(max(0, total)))
        if let message { frame.string("message", message) }
        outbox.write(frame.finish(), to: connection.channel)
    }
}
