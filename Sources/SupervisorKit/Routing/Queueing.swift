import Logging
import NIOCore
import PluginProtocol
import SupervisorCore

/// A request for a plugin that cannot take it yet, kept until it can (SPEC §8: no call is lost to a
/// planned change). The bytes are a copy of the request as it came; it is forwarded from them.
struct QueuedRequest: WaitingRequest {
    var kind: MessageKind

    /// What a request of `kind` is as an activation's `trigger` (SPEC §16): `call`, `open`,
    /// `event <name>`.
    static func trigger(_ kind: MessageKind, event name: String?) -> String {
        kind == .send ? "event \(name ?? "")" : kind.rawValue
    }

    /// This one's trigger. Its event's name is read from its bytes again: they passed the
    /// configured depth when they came, and the bound here only keeps that read from failing.
    var trigger: String {
        let name = kind != .send ? nil : bytes.withUnsafeBytes { raw in
            (try? Envelope.parse(raw, maxDepth: 1_024)).flatMap { Envelope.string(raw, $0.name) }
        }
        return Self.trigger(kind, event: name)
    }
    /// The calling plugin, for a request from a plugin.
    var caller: String?
    var bytes: [UInt8]
    var origin: ReplyOrigin
    /// Its own deadline, counted from when it arrived.
    var deadline: Instant
    /// The descriptors of the bytes it carries, kept until it is forwarded (closed if it never is).
    var payload: Payload?
    /// Workers that died holding it, and times it was sent again after its plugin had started it.
    var attempts = Attempts.first

    /// A call or an `open`, which the plugin's call metrics count; not an event (`send`) that
    /// waits for its plugin.
    var isCall: Bool { kind != .send }

    var size: Int { bytes.count }
}

extension Router {
    /// Queues a request for `record`; an error instead when its queue is full.
    /// `deadline`: a request that waited already keeps its own.
    func enqueue(_ kind: MessageKind, for record: PluginRecord, from caller: String?, env: Envelope, bytes: UnsafeRawBufferPointer,
                 origin: ReplyOrigin, deadline: Instant? = nil, payload: Payload? = nil, attempts: Attempts = .first) -> ErrorBody? {
        let deadline = deadline ?? Instant.now.adding(milliseconds: timeout(for: record, requested: env.timeoutMs))
        let bytesLimit = config.heldBytesLimit
        guard record.waiting.admits(size: bytes.count, bytesLimit: bytesLimit) else {
            if kind != .send { record.callMetrics?.count(.unavailable) }
            return ErrorBody(.unavailable, "\(Route.waitingFor(record.routeTarget)), and \(record.waiting.bytes >> 20) MiB of requests wait for it: this one (\(bytes.count) bytes) would pass the \(bytesLimit >> 20) MiB that may wait for one plugin; try again later")
        }
        let request = QueuedRequest(kind: kind, caller: caller, bytes: Array(bytes), origin: origin, deadline: deadline, payload: payload,
                                    attempts: attempts)
        guard record.waiting.add(request, limit: config.callQueueLimit) else {
            if request.isCall { record.callMetrics?.count(.unavailable) }
            return Route.queueFull(record.routeTarget, limit: config.callQueueLimit)
        }
        // Checked at every tick while anything waits (`expireWaiting`).
        deadlines.due(.now())
        keepsItsStream(kind, env, origin)
        return nil
    }

    /// A link to `callee` ended by itself. The kernel closes a dying worker's sockets a moment
    /// (microseconds) before its pidfd says it has ended, so it may be ending: requests for it wait
    /// in its queue (`Route.mustWait`) until its exit is seen (the restart forwards them) or, 2 ms later,
    /// its pidfd says it is alive (they are forwarded then). Nothing waits on the loop meanwhile.
    func linkEndedByItself(_ callee: WorkerInstance) {
        guard !callee.mayHaveEnded else { return }
        callee.mayHaveEnded = true
        loop.assumeIsolated().scheduleTask(in: .milliseconds(2)) { [self, weak callee] in
            // Reaped meanwhile, or ending (its pidfd is readable, its exit on its way to the loop):
            // the exit decides, and the restart forwards what waits.
            guard let callee, callee.mayHaveEnded, !callee.phase.hasExited, !callee.process.hasEnded(within: 0) else { return }
            callee.mayHaveEnded = false
            if let record = table[callee.identifier], record.instance === callee { forwardWaiting(record) }
        }
    }

    /// `record` runs (again), or its worker's socket takes more: what waited for it is forwarded,
    /// in the order it came, until the socket takes no more; the rest waits on as it was.
    func forwardWaiting(_ record: PluginRecord) {
        guard !record.waiting.isEmpty else { return }
        let released = record.waiting.release()
        for (index, request) in released.enumerated() {
            if case .wait = Route.decide(record.routeTarget, named: record.identifier, shuttingDown: isShuttingDown) {
                return record.waiting.putBack(released[index...])
            }
            request.bytes.withUnsafeBytes { raw in
                guard let env = try? Envelope.parse(raw, maxDepth: config.maxJSONDepth) else {
                    return outbox.answer(request.origin, error: ErrorBody(.badRequest, "the request could not be replayed"))
                }
                if let error = forward(request.kind, to: record.identifier, from: request.caller, env: env, bytes: raw,
                                       origin: request.origin, deadline: request.deadline, payload: request.payload, attempts: request.attempts) {
                    outbox.answer(request.origin, error: error)
                }
            }
        }
    }

    /// At every tick of the deadline timer while anything waits (10 ms): a waiting request past its
    /// deadline fails with `timeout`; every request waiting for a plugin that is `failed` or
    /// `stopped` for good, or at shutdown, fails with `unavailable` at once. Returns the next tick
    /// while requests still wait, nil when none does.
    func expireWaiting(now: NIODeadline) -> NIODeadline? {
        var waiting = false
        for record in table.all where !record.waiting.isEmpty {
            if let reason = Route.abandonReason(record.routeTarget, shuttingDown: isShuttingDown) {
                failWaiting(record, because: reason)
                continue
            }
            for request in record.waiting.expire(now: now.instant) {
                if request.isCall { record.callMetrics?.count(.timeout) }
                outbox.answer(request.origin, error: ErrorBody(.timeout, "\(record.identifier) was \(record.phase.shown) for the whole of the request's timeout"))
            }
            if !record.waiting.isEmpty { waiting = true }
        }
        return waiting ? now + .nanoseconds(Int64(DeadlineTimer.granularityNanoseconds)) : nil
    }
}

extension Router {
    /// A plugin leaves the table (uninstalled, removed by a rescan, a failed first install): what
    /// waited for it fails now, with `reason`.
    func forget(_ record: PluginRecord, because reason: String) {
        failWaiting(record, because: reason)
        // Who waited for it to start (a `restart`, a reload) hears it will not.
        record.settleWaiters(reason)
        table.remove(record)
        effects.post(.settleReloads)
    }

    /// Everything waiting for `record` fails now with `unavailable: <reason>`.
    private func failWaiting(_ record: PluginRecord, because reason: String) {
        for request in record.waiting.abandon() {
            if request.isCall { record.callMetrics?.count(.unavailable) }
            outbox.answer(request.origin, error: ErrorBody(.unavailable, reason))
        }
    }
}

extension Router {
    /// A client's request `id` that waits for its plugin fails now with `error`: it leaves the
    /// queue, is never forwarded, and what it held goes.
    func refuseWaiting(_ connection: ControlConnection, _ id: UInt64, _ error: ErrorBody) {
        withdrawWaiting(connection, id) { record, refused in
            if refused.contains(where: \.isCall) { record.callMetrics?.count(.unavailable) }
        }
        outbox.answer(.client(connection, id: id), error: error)
    }

    /// A client cancels its request `id` that waits for its plugin: it leaves the queue, is never
    /// forwarded, and gets no answer (as a cancelled call in flight). False: none waits.
    func cancelWaiting(_ connection: ControlConnection, _ id: UInt64) -> Bool {
        guard withdrawWaiting(connection, id) else { return false }
        connection.answered()
        connection.waitingStreams[id] = nil
        return true
    }

    /// Takes the client's request `id` out of the queue it waits in (`each` hears which, and what
    /// left); whether it waited anywhere.
    @discardableResult
    private func withdrawWaiting(_ connection: ControlConnection, _ id: UInt64,
                                 _ each: (PluginRecord, [QueuedRequest]) -> Void = { _, _ in }) -> Bool {
        var found = false
        for record in table.all where !record.waiting.isEmpty {
            let withdrawn = record.waiting.withdraw { request in
                guard case .client(let client, let clientID) = request.origin else { return false }
                return client === connection && clientID == id
            }
            guard !withdrawn.isEmpty else { continue }
            found = true
            each(record, withdrawn)
        }
        return found
    }
}

extension QueuedRequest {
    /// Its client disconnected, or its calling worker ended: nobody would read the answer.
    var callerIsGone: Bool { origin.callerIsGone }
}

extension ReplyOrigin {
    /// The client disconnected, the calling worker ended, or the program gave up on the request:
    /// nobody would read the answer.
    var callerIsGone: Bool {
        switch self {
        case .client(let connection, _): return connection.closed
        case .plugin(let caller, _): return caller.phase.hasExited || caller.channel == nil
        case .host(let request): return request.isSettled
        case .local: return false
        }
    }
}
