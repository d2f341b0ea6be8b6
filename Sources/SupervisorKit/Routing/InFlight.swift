import Logging
import NIOCore
import PluginProtocol
import SupervisorCore

/// The requests in flight to each worker (its `pending` table), and how each is settled: its reply
/// (Router.deliverReply), its deadline (`expire`), its worker's end (Lifecycle/HeldCalls.swift: replayed, retried or failed), or its caller
/// going away (`cancelInFlight`). Lifecycle events are requests too (`sendEvent`). Every component
/// sends and settles requests through these; a worker draining for its stop is told when its last
/// call is settled (`Effect.drained`).
extension Shared {

    /// Counts an answered request from a client or plugin, and logs it at debug level with its
    /// trace context (SPEC §10).
    @inline(__always)
    func settled(_ request: PendingRequest, _ outcome: CallHop.Outcome, by instance: WorkerInstance) {
        guard let call = request.call else { return }
        let nanoseconds = (NIODeadline.now() - call.started).nanoseconds
        call.metrics.record(outcome, nanoseconds: nanoseconds)
        if let log = call.log {
            let ms = Double(nanoseconds) / 1_000_000
            logger.debug("\(request.what) \(log.label): \(outcome.label) in \(ms) ms", metadata: [
                "plugin": "\(instance.identifier)", "trace_id": "\(log.trace.traceIDText)",
                "span_id": "\(log.trace.spanIDText)", "duration_ms": .stringConvertible(ms),
            ])
        }
    }


    /// Fails requests whose deadline has passed with `timeout`, and tells their plugin to `cancel`.
    /// Every live worker counts, whatever its role (an update's new version answering `startup`,
    /// an old one draining). Returns the earliest deadline left (DeadlineTimer).
    func expire(now: NIODeadline) -> NIODeadline? {
        var next: Instant?
        for instance in table.liveWorkers where !instance.pending.isEmpty {
            let (expired, left) = instance.pending.expire(now: now.instant)
            if let left, next.map({ left < $0 }) ?? true { next = left }
            guard !expired.isEmpty else { continue }
            for (id, request) in expired {
                settled(request, .timeout, by: instance)
                let why = request.stream?.timeoutReason(request.deadline, plugin: instance.identifier)
                    ?? "\(instance.identifier) did not answer \(request.what) in time"
                outbox.answer(request.origin, error: ErrorBody(.timeout, why))
                // An unlink is the worker's own business, not its plugin's: nothing to cancel there.
                if request.what.cancelledOnTimeout { sendCancel(id, to: instance) }
            }
            callLeft(instance)
        }
        return next?.deadline
    }

    /// The caller of requests in flight went away (client disconnected, calling worker died):
    /// drop them at their callees and tell each callee to `cancel`.
    func cancelInFlight(_ entries: [UInt64: (callee: WorkerInstance, id: UInt64)]) {
        for (_, entry) in entries where entry.callee.pending.settle(entry.id) != nil {
            sendCancel(entry.id, to: entry.callee)
            callLeft(entry.callee)
        }
    }

    /// A call inside `instance` was settled (answered, timed out, given up by its caller) or a
    /// link to it given back: a worker draining for its stop goes on once the last one is.
    @inline(__always)
    func callLeft(_ instance: WorkerInstance) {
        if case .draining = instance.phase, !instance.hasCallsInside { effects.post(.drained(instance)) }
    }

    func sendCancel(_ id: UInt64, to instance: WorkerInstance) {
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
        let ms = config.isDebugged(instance.identifier) ? SupervisorConfig.longestTimeoutMs
            : timeoutMs ?? instance.manifest.limits.callTimeoutMs ?? config.callTimeoutMs
        let deadline = Instant.now.adding(milliseconds: ms)
        if instance.pending.isEmpty { table.watch(instance) }
        let id = instance.pending.add(PendingRequest(origin: .local(done), deadline: deadline, what: .event(name)))
        instance.crash.watermark.sent(id)
        var frame = outbox.encoder(.event, for: channel)
        frame.uint("id", id)
        frame.string("name", name.rawValue)
        payload?(&frame)
        deadlines.due(deadline.deadline)
        outbox.write(frame.finish(), to: channel)
    }

    /// Sends `name` to every running plugin (or one); `done` gets who acknowledged and who did not.
    func broadcast(_ name: EventName, only: String? = nil, _ done: @escaping ([String], [String: String]) -> Void) {
        // A running plugin whose worker is being stopped (idle, restarted, replaced) has no state
        // left to tell, and would end before it answered: in neither list. One that cannot take
        // it now (not keeping up) is named in `failed` with why.
        var delivered: [String] = []
        var failed: [String: String] = [:]
        let targets = table.inOrder.filter { record in
            guard record.phase == .running, only == nil || record.identifier == only else { return false }
            let target = record.routeTarget
            switch Route.decide(target, named: record.identifier, shuttingDown: isShuttingDown) {
            case .forward: return true
            case .refuse(let error): failed[record.identifier] = error.description
            case .wait, .activate: if let error = Route.notKeepingUp(target) { failed[record.identifier] = error.description }
            }
            return false
        }
        var remaining = targets.count
        if remaining == 0 { done([], failed); return }
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
        guard !isShuttingDown else { return }
        broadcast(event) { [self] delivered, failed in
            let missing = failed.isEmpty ? "" : "; not by \(failed.keys.sorted().joined(separator: ", "))"
            logger.info("\(event.rawValue) acknowledged by \(delivered.count) plugin(s)\(missing)")
        }
    }
}
