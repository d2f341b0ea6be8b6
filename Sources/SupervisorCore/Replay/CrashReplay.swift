import PluginProtocol

/// What becomes of the calls inside a worker that died (SPEC §15): each is replayed, retried,
/// failed or dropped, decided as values the driver carries out. One per plugin, made from its
/// manifest and its worker's `hello`.
///
/// The mechanism it is built for, which costs nothing per call until a crash:
/// - Calls to one worker carry ids increasing in send order (the supervisor's per-worker
///   `CallTable`); each is recorded in the worker's `TakenWatermark` (`sent`) before its frame is
///   written.
/// - The worker advances a watermark as its plugin takes calls, on frames it sends anyway and in a
///   page it shares with the supervisor: every call with id <= `taken` may have been handed to the
///   plugin. The driver passes each report to `TakenWatermark.reported`, and the page's value once
///   more after the death; the watermark stays monotonic, clamped to the highest id sent, and a
///   worker caught going back is trusted no more.
/// - The supervisor keeps a duplicate of the worker's end of its socket. When the worker dies it
///   reads back the call frames still queued there (`unread`): the kernel witnesses the worker never
///   read them, so their plugin never started them, whatever the worker said.
/// - A call is not started iff it is in `unread`, or the worker is trusted and its id > `taken`.
///
/// Then, for each call the dead worker held, oldest id first (`decide`):
/// 1. its caller is gone: dropped, unanswered and not sent again;
/// 2. its deadline has passed: fails with `timeout`;
/// 3. the plugin will not come back (`failed`, `stopped`, the supervisor shutting down, a crash
///    loop that hit the restart intensity limit): fails with `unavailable` and the reason, at once;
/// 4. not started: replayed to the next worker, in its original order, with its original deadline,
///    ahead of what arrived later (`WaitQueue.putAhead`), unless `crashLimit` workers have now died
///    holding it (a frame that kills a worker before its plugin takes it must not loop). When a call
///    it held had started, the death is laid to that call and to the first that had not (the next
///    one its plugin would have taken: a frame that kills a worker on receipt, behind a long call),
///    not to the calls queued behind them (six crashing calls in a row must not fail the harmless
///    one after them);
/// 5. started: retried if its method is idempotent, `retries < retryLimit` (`limits.retries`), the
///    deadline holds and no part of its answer (a stream's chunk) has reached its caller;
///    otherwise fails with `unavailable` and `started: true`.
/// A call is in exactly one action, so it is answered at most once; a started call is sent again
/// only if its method is idempotent, so no other call runs twice.
package struct CrashReplay: Sendable, Equatable {
    /// The plugin, as messages name it.
    package var plugin: String
    package var idempotent: IdempotentMethods
    /// How many times one started call may be sent again (`limits.retries`).
    package var retryLimit: Int
    /// How many workers may die holding one call before it fails instead of being replayed again.
    package var crashLimit: Int

    /// Workers that may die holding one call, by default: the default restart intensity limit (5
    /// in 60 s) fails a tight crash loop first; this holds when restarts are spread out.
    package static let defaultCrashLimit = 5

    package init(plugin: String, idempotent: IdempotentMethods, retryLimit: Int = Manifest.Limits.defaultRetries,
                 crashLimit: Int = CrashReplay.defaultCrashLimit) {
        self.plugin = plugin
        self.idempotent = idempotent
        self.retryLimit = max(0, retryLimit)
        self.crashLimit = max(1, crashLimit)
    }

    /// The plugin's rules from its manifest (`idempotent`, `limits.retries`) and the methods its
    /// worker flagged idempotent in `hello`.
    package init(manifest: Manifest, flagged: [String] = [], crashLimit: Int = CrashReplay.defaultCrashLimit) {
        self.init(plugin: manifest.identifier, idempotent: IdempotentMethods(manifest: manifest, flagged: flagged),
                  retryLimit: manifest.limits.retries, crashLimit: crashLimit)
    }

    /// Whether another worker will take the plugin's calls.
    package enum Successor: Sendable, Equatable {
        /// It restarts (now or after a backoff), or an update's new version comes up.
        case comes
        /// It will not run: why (`failed` with its problem, e.g. the crash loop; `stopped`; the
        /// supervisor shutting down).
        case never(reason: String)

        /// Read from the plugin's state after its life took the worker's end (`PluginLife.workerEnded`),
        /// with the same rule as the wait queue's (`Route.abandonReason`).
        package static func after(_ target: Route.Target, shuttingDown: Bool) -> Successor {
            Route.abandonReason(target, shuttingDown: shuttingDown).map { .never(reason: $0) } ?? .comes
        }
    }

    /// What the driver does with one call of the dead worker.
    package enum Action<Call> {
        /// Never started: send it to the next worker, in this order, with its own deadline
        /// (`crashes` counted).
        case replay(Call)
        /// Started, idempotent, within its retries and its deadline: send it again, in this order
        /// (`retries` and `crashes` counted).
        case retry(Call)
        /// Answer its caller with `error`; `started`: the error's data says `"started": true`, as
        /// the plugin may have run it.
        case fail(Call, ErrorBody, started: Bool)
        /// Its caller is gone: nothing to answer, nothing to send.
        case drop(Call)

        /// The call, whatever becomes of it.
        package var call: Call {
            switch self {
            case .replay(let call), .retry(let call), .fail(let call, _, _), .drop(let call): return call
            }
        }
    }

    /// Every call's action, oldest id first, and the counts the metrics and the restart's log line
    /// report (`plugin_calls_replayed_total`, `plugin_calls_retried_total`).
    package struct Outcome<Call> {
        package var actions: [Action<Call>] = []
        package var replayed = 0
        package var retried = 0
        /// Failed with `started: true`.
        package var failedStarted = 0
        /// Failed without having started (timed out, no successor, the crash limit).
        package var failedUnstarted = 0
        package var dropped = 0

        /// What goes to the next worker (replays and retries), in the order it goes.
        package var resent: [Call] {
            actions.compactMap { action in
                switch action {
                case .replay(let call), .retry(let call): return call
                case .fail, .drop: return nil
                }
            }
        }

        /// The calls to answer with an error now.
        package var failures: [(call: Call, error: ErrorBody, started: Bool)] {
            actions.compactMap { action in
                if case .fail(let call, let error, let started) = action { return (call, error, started) }
                return nil
            }
        }
    }

    /// Decides for each call the dead worker held (`CallTable.removeAll()`'s answer: dead worker's
    /// id and entry); `watermark` after the driver fed it the shared page, `unread` the ids read back
    /// from the socket, `crash` the end as the log says it (`killed by SIGSEGV`), `successor` after
    /// the plugin's life took the end.
    package func decide<Call: ReplayableCall>(_ calls: [(id: UInt64, entry: Call)], watermark: TakenWatermark, unread: Set<UInt64>,
                                              crash: String, successor: Successor, now: Instant) -> Outcome<Call> {
        var outcome = Outcome<Call>()
        let sorted = calls.sorted(by: { $0.id < $1.id })
        let explained = sorted.contains { watermark.mayHaveStarted($0.id, unread: unread) }
        let next = sorted.first { !watermark.mayHaveStarted($0.id, unread: unread) }?.id
        for (id, call) in sorted {
            let started = watermark.mayHaveStarted(id, unread: unread)
            let action = decide(call, started: started, crash: crash, successor: successor, now: now,
                                counted: started || !explained || id == next)
            switch action {
            case .replay: outcome.replayed += 1
            case .retry: outcome.retried += 1
            case .fail(_, _, let started): if started { outcome.failedStarted += 1 } else { outcome.failedUnstarted += 1 }
            case .drop: outcome.dropped += 1
            }
            outcome.actions.append(action)
        }
        return outcome
    }

    /// Why a started call of `method` is not sent again, when it is not idempotent.
    func notIdempotent(_ method: String) -> String {
        "\(method) is not idempotent (neither the manifest's `idempotent` nor the plugin's own declaration names it)"
    }

    /// Why a started idempotent call is not sent again: its retries are spent.
    func retriedAlready(_ retries: Int) -> String {
        "retried \(retries) time\(retries == 1 ? "" : "s") already (limits.retries: \(retryLimit))"
    }

    /// One call's fate, `started` as the witness says; `counted`: the death counts against it
    /// (not for a call queued behind the one the death is laid to).
    package func decide<Call: ReplayableCall>(_ call: Call, started: Bool, crash: String, successor: Successor, now: Instant,
                                              counted: Bool = true) -> Action<Call> {
        if call.callerIsGone { return .drop(call) }
        let method = call.method
        if call.deadline <= now {
            return .fail(call, ErrorBody(.timeout, "\(plugin) did not answer \(method) in time: its worker ended (\(crash)) past the call's deadline"),
                         started: started)
        }
        if case .never(let reason) = successor {
            return .fail(call, ErrorBody(.unavailable, "\(plugin)'s worker ended (\(crash)) and no worker follows it: \(reason)"), started: started)
        }
        var next = call
        if counted { next.crashes += 1 }
        guard started else {
            guard next.crashes < crashLimit else {
                return .fail(call, ErrorBody(.unavailable, "\(plugin)'s worker ended (\(crash)) before its plugin started \(method); \(next.crashes) workers "
                                                 + "have ended holding this call (at most \(crashLimit)): it is not sent again"), started: false)
            }
            return .replay(next)
        }
        guard !call.answerBegun else {
            return .fail(call, ErrorBody(.unavailable, "\(plugin)'s worker ended (\(crash)) while \(method) answered in a stream; part of its "
                                             + "answer reached the caller, so it is not run again"), started: true)
        }
        guard idempotent.contains(method) else {
            return .fail(call, ErrorBody(.unavailable, "\(plugin)'s worker ended (\(crash)) after its plugin started \(method); it is not run again: "
                                             + notIdempotent(method)), started: true)
        }
        guard call.retries < retryLimit else {
            return .fail(call, ErrorBody(.unavailable, "\(plugin)'s worker ended (\(crash)) after its plugin started \(method), "
                                             + "\(retriedAlready(call.retries)); it is not run again"),
                         started: true)
        }
        next.retries += 1
        return .retry(next)
    }
}

extension CrashReplay.Action: Equatable where Call: Equatable {}
extension CrashReplay.Action: Sendable where Call: Sendable {}
extension CrashReplay.Outcome: Sendable where Call: Sendable {}
