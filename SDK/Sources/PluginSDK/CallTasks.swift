import PluginProtocol

/// Tasks kept to run async methods' calls one after another, instead of a task made for each call.
///
/// A task made per call costs its object, the contexts of the closures it runs and the slabs of its
/// allocator, each a `malloc` and a `free` (`scripts/count-allocations.sh`: five of a Swift
/// caller's six `malloc`s per call before tasks were kept). A kept task has all of that already: between calls
/// it waits (`park`) for the next call handed to it (`hand`). Nothing of one call outlives it on
/// the task: its trace and attachments are task-local values bound around the method only, and a
/// task whose call was cancelled is not kept (cancellation cannot be undone).
///
/// Each `CallTask` is its own state machine (`Phase`), under its own lock: the runtime's `running`
/// table maps a call's id to its task and turn, and a `cancel` reaches the call only while that
/// turn is the task's (`cancel(turn:)`), never the call after it.
final class CallTask: Sendable {
    /// One call for the task to run: `PluginRuntime.answer`'s arguments.
    struct Call: Sendable {
        var id: UInt64
        var trace: CarriedTrace?
        var attached: [Bytes]?
        var work: PluginAPI.AsyncWork
    }

    private enum Phase {
        /// Running a call (or between calls, before it parks).
        case running
        /// Waiting for its next call.
        case parked(UnsafeContinuation<Call?, Never>)
        /// Given a call before it parked: it runs that one when it does.
        case handed(Call)
        /// Ended, or ending: it takes no call.
        case retired
    }

    private struct State {
        var phase: Phase = .running
        /// Counts the calls it has run: the turn of the call it runs now.
        var turn: UInt64 = 0
        /// Its task, for `cancel`.
        var task: Task<Void, Never>?
    }

    private let state = Guarded(State())

    /// A kept task: `make` makes its `Task`, whose body runs its first call and then each one
    /// handed to it (`PluginRuntime.serve`). Stored under the lock `cancel` takes, so a cancel of
    /// the first call never misses it.
    static func start(_ make: (CallTask) -> Task<Void, Never>) -> CallTask {
        let kept = CallTask()
        kept.state.withLock { $0.task = make(kept) }
        return kept
    }

    /// Whether it waits for a call.
    var isParked: Bool {
        state.withLock { s in
            if case .parked = s.phase { return true }
            return false
        }
    }

    /// Gives the task its next call (at once if parked, else when it parks) and returns the call's
    /// turn; nil if it takes none (retired: the caller makes another task).
    func hand(_ call: Call) -> UInt64? {
        let (continuation, turn): (UnsafeContinuation<Call?, Never>?, UInt64?) = state.withLock { s in
            switch s.phase {
            case .parked(let c):
                s.phase = .running
                return (c, s.turn)
            case .running:
                s.phase = .handed(call)
                return (nil, s.turn)
            case .handed, .retired:
                return (nil, nil)
            }
        }
        continuation?.resume(returning: call)
        return turn
    }

    /// Called by the task once its call is settled: the next turn begins, so a late `cancel` of the
    /// call just run does not reach the next. False if the task was cancelled (it must end).
    func endTurn() -> Bool {
        state.withLock { s in
            s.turn &+= 1
            if s.task?.isCancelled ?? false {
                s.phase = .retired
                return false
            }
            return true
        }
    }

    /// Waits for the next call; nil once retired.
    func park() async -> Call? {
        await withUnsafeContinuation { (c: UnsafeContinuation<Call?, Never>) in
            let ready: Call?? = state.withLock { s in
                switch s.phase {
                case .handed(let call):
                    s.phase = .running
                    return .some(call)
                case .retired:
                    return .some(nil)
                case .running, .parked:
                    s.phase = .parked(c)
                    return nil
                }
            }
            if let ready { c.resume(returning: ready) }
        }
    }

    /// Ends a parked task (or one about to park); nothing happens to a call it runs.
    func retire() {
        let continuation: UnsafeContinuation<Call?, Never>? = state.withLock { s in
            defer { s.phase = .retired }
            if case .parked(let c) = s.phase { return c }
            return nil
        }
        continuation?.resume(returning: nil)
    }

    /// Cancels the call of `turn` if it still runs (SPEC §3 `cancel`); the task then ends after it.
    func cancel(turn: UInt64) {
        state.withLock { s in
            // Cancelled under the lock `endTurn` takes: either the call still runs and the task
            // then sees it cancelled at its turn's end, or its turn is over and nothing happens.
            // (Cancellation handlers run here; none of the SDK's takes this task's lock.)
            guard s.turn == turn else { return }
            switch s.phase {
            case .running, .handed: s.task?.cancel()
            case .parked, .retired: break
            }
        }
    }
}

/// The kept tasks waiting for a call: taken by `PluginRuntime.run`, given back by a task whose
/// call is done. At most `limit` wait (more calls at once than that get tasks that end after
/// theirs): what a burst of calls leaves behind is bounded.
final class CallTaskPool: Sendable {
    private struct Idle {
        var tasks: [CallTask] = []
        /// Shut down: no task is kept any more.
        var closed = false
    }

    private let idle = Guarded(Idle())
    let limit: Int

    init(limit: Int) {
        self.limit = limit
    }

    func take() -> CallTask? { idle.withLock { $0.tasks.popLast() } }

    /// How many wait for a call now.
    var waiting: Int { idle.withLock { $0.tasks.count } }

    /// Keeps `task` for a later call; false when enough wait already or the pool is closed (the
    /// task should end).
    func giveBack(_ task: CallTask) -> Bool {
        idle.withLock { s in
            guard !s.closed, s.tasks.count < limit else { return false }
            s.tasks.append(task)
            return true
        }
    }

    /// Ends every waiting task (a `memoryWarning`); later calls make and keep tasks again.
    func trim() {
        for task in idle.withLock({ s in defer { s.tasks.removeAll() }; return s.tasks }) { task.retire() }
    }

    /// Ends every waiting task and keeps none from now on (the plugin is shutting down).
    func close() {
        idle.withLock { $0.closed = true }
        trim()
    }
}
