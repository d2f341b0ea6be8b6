import NIOCore
import PluginProtocol
import SupervisorCore

/// The calls inside a worker that ended (SPEC §15): what its plugin never started goes to the next
/// worker in its original order with its original deadline; what it started goes again only if its
/// method is idempotent and its retries allow; everything else fails now, a started call with
/// `"started": true`. The decisions are `CrashReplay`'s (SupervisorCore); this carries them out.
extension Lifecycle {
    /// What became of a worker's calls at its end, for its `exited` event and the metrics.
    struct Resent {
        var replayed = 0
        var retried = 0
    }

    /// Settles every request `instance` held (those it held when its socket closed, and any still
    /// in its table), reading its taken page one last time. `record`: its plugin, if still known
    /// (its phase already moved by the end); `crash`: the end as the log says it; `afterStop`: the
    /// worker was being stopped on purpose (drained for a restart, an update, an uninstall...).
    func settleHeld(_ instance: WorkerInstance, of record: PluginRecord?, crash: String, afterStop: Bool = false) -> Resent {
        instance.crash.held += instance.pending.removeAll()
        // The marks of the links it served, while its page is mapped; their callers see them end now.
        instance.concludeLinks(crash: crash)
        let (witness, lie) = instance.crash.conclude()
        if let lie {
            logger.warning("the worker's taken mark went back (\(lie)): every call it held counts as started",
                           metadata: ["plugin": "\(instance.identifier)", "pid": "\(instance.pid)"])
        }
        let held = instance.crash.held
        instance.crash.held = []
        guard !held.isEmpty else { return Resent() }
        var replayable: [(id: UInt64, entry: PendingRequest)] = []
        for (id, request) in held {
            if request.resend != nil {
                replayable.append((id, request))
                continue
            }
            // An event, an unlink, a call with an input stream or whose descriptors went to the
            // worker: not sent again.
            let started = request.isCall && witness.mayHaveStarted(id, unread: [])
            fail(request, of: instance, ErrorBody(.unavailable, "\(instance.identifier) exited (\(crash)) before answering \(request.what)"
                                                    + (request.stream?.credit.input != nil ? "; a call with an input stream is not sent again" : "")),
                 started: started)
        }
        guard !replayable.isEmpty else { return Resent() }
        let rules = CrashReplay(manifest: record?.manifest ?? instance.manifest, flagged: instance.hello?.idempotent ?? [])
        let successor: CrashReplay.Successor
        if let record {
            // A worker that ended while being stopped leaves its plugin `stopped` for a moment: whoever
            // asked for the stop (a restart, an update's stop and start, a reload, an uninstall)
            // decides in its exit callbacks, which run after this, whether a worker follows. So what
            // its plugin never started joins what came during the drain in the wait queue (SPEC §8,
            // §15): the next worker takes it, or, when none follows, the queue fails it at the
            // deadline timer's next tick with the reason the plugin stays down (`Router.expireWaiting`:
            // `<id> is stopped`, `<id> was uninstalled`, `<id> is failed: ...`). At shutdown nothing follows.
            let stopping = afterStop && !isShuttingDown && record.phase == .stopped
            successor = stopping ? .comes : .after(record.routeTarget, shuttingDown: isShuttingDown)
        } else {
            successor = .never(reason: "\(instance.identifier) is no longer installed")
        }
        let outcome = rules.decide(replayable, watermark: witness, unread: [], crash: crash, successor: successor, now: .now)
        for (request, error, started) in outcome.failures {
            fail(request, of: instance, error, started: started)
        }
        let resent = outcome.resent.map(QueuedRequest.init(resending:))
        if let record, !resent.isEmpty {
            record.waiting.putAhead(resent)
            // Its deadlines and the plugin's fate are watched from now on (`Router.expireWaiting`);
            // a plugin already served by another worker (an old version's calls to the new one) takes them now.
            deadlines.due(.now())
            if Route.decide(record.routeTarget, named: record.identifier, shuttingDown: isShuttingDown) == .forward {
                effects.post(.forwardWaiting(record))
            }
        }
        shared.metrics.resent(instance.identifier, replayed: outcome.replayed, retried: outcome.retried)
        let failed = outcome.failedStarted + outcome.failedUnstarted
        let line = "its worker held \(held.count) request\(held.count == 1 ? "" : "s"): \(outcome.replayed) go to the next worker (not started), "
            + "\(outcome.retried) retried (started, idempotent), \(failed) failed (\(outcome.failedStarted) started), "
            + "\(outcome.dropped + held.count - replayable.count) otherwise settled"
        logger.log(level: failed > 0 ? .warning : .info, "\(line)", metadata: ["plugin": "\(instance.identifier)", "pid": "\(instance.pid)"])
        return Resent(replayed: outcome.replayed, retried: outcome.retried)
    }

    /// Answers a held request with `error` (`started`: with `"data": {"started": true}`), counted
    /// as unavailable, or as a timeout when it is one.
    private func fail(_ request: PendingRequest, of instance: WorkerInstance, _ error: ErrorBody, started: Bool) {
        var error = error
        if started { error.data = ErrorData(started: true) }
        shared.settled(request, error.code == ErrorCode.timeout.rawValue ? .timeout : .unavailable, by: instance)
        outbox.answer(request.origin, error: error)
    }
}

extension PendingRequest: ReplayableCall {
    /// The method called (an `open`'s URI), read from the frame that was sent: only when its
    /// worker died holding it.
    var method: String {
        guard let resend else { return what.description }
        return resend.frame.withUnsafeReadableBytes { raw in
            let body = UnsafeRawBufferPointer(rebasing: raw[min(Frame.headerSize, raw.count)...])
            guard let env = try? Envelope.parse(body) else { return what.description }
            return Envelope.string(body, env.method) ?? Envelope.string(body, env.uri) ?? what.description
        }
    }

    var retries: Int {
        get { resend?.attempts.retries ?? 0 }
        set { resend?.attempts.retries = newValue }
    }

    var crashes: Int {
        get { resend?.attempts.crashes ?? 0 }
        set { resend?.attempts.crashes = newValue }
    }

    var callerIsGone: Bool { origin.callerIsGone }

    /// A chunk of its stream's answer has gone to its caller.
    var answerBegun: Bool { (stream?.credit.seq ?? 0) > 0 }
}

extension QueuedRequest {
    /// A held call that goes to the next worker: the frame that went to the dead one is forwarded
    /// again (a new id, a new hop in its trace), with its own deadline and its attempts counted.
    init(resending request: PendingRequest) {
        let resend = request.resend!
        let body = resend.frame.withUnsafeReadableBytes { Array($0[min(Frame.headerSize, $0.count)...]) }
        // A stream's deadline in the table is its idle one: the call's own goes with it.
        self.init(kind: request.what == .open ? .open : .call, caller: resend.caller, bytes: body, origin: request.origin,
                  deadline: request.stream?.callDeadline ?? request.deadline, payload: nil, attempts: resend.attempts)
    }
}
