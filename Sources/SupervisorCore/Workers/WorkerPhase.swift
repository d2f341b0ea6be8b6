/// Where one worker process is in its life. `WorkerInstance.move(to:)` refuses a move this table
/// does not allow.
package enum WorkerPhase: Equatable, Sendable, CustomStringConvertible {
    /// The process was spawned; it has not said `hello` yet.
    case spawned
    /// It said `hello` (sandboxed, plugin loaded); `startup` waits until its dependencies run.
    case loaded
    /// `startup` was sent.
    case startingUp
    /// It answered `startup`.
    case running
    /// The supervisor is stopping it and waits, up to `drainTimeoutMs`, for the calls inside it to
    /// be answered (SPEC §8); new calls wait for its successor meanwhile.
    case draining
    /// The supervisor is stopping it on purpose (willTerminate, or SIGKILL before hello).
    case stopping
    /// Reaped, with how it ended. Its last frames (an `exit` notice) may still be unread in its
    /// socket. `afterStop`: it was being stopped on purpose.
    case exited(afterStop: Bool, WorkerExit)
    /// Its exit has been recorded and acted on.
    case finalized

    package var description: String {
        switch self {
        case .spawned: return "spawned"
        case .loaded: return "loaded"
        case .startingUp: return "startingUp"
        case .running: return "running"
        case .draining: return "draining"
        case .stopping: return "stopping"
        case .exited(let afterStop, _): return afterStop ? "exited (stopped)" : "exited"
        case .finalized: return "finalized"
        }
    }

    /// Reaped (its exit is known).
    package var hasExited: Bool {
        switch self {
        case .exited, .finalized: return true
        default: return false
        }
    }

    /// Being stopped on purpose, or ended that way.
    package var stopRequested: Bool {
        switch self {
        case .draining, .stopping, .exited(afterStop: true, _): return true
        default: return false
        }
    }

    package static func allows(from: WorkerPhase, to: WorkerPhase) -> Bool {
        switch (from, to) {
        case (.spawned, .loaded), (.loaded, .startingUp), (.startingUp, .running): return true
        case (.spawned, .stopping), (.loaded, .stopping), (.startingUp, .stopping), (.running, .stopping): return true
        // Only a worker with calls inside drains (it said hello, so it has a socket to answer on).
        case (.loaded, .draining), (.startingUp, .draining), (.running, .draining), (.draining, .stopping): return true
        case (.stopping, .exited(afterStop: true, _)), (.draining, .exited(afterStop: true, _)): return true
        case (.spawned, .exited(afterStop: false, _)), (.loaded, .exited(afterStop: false, _)),
             (.startingUp, .exited(afterStop: false, _)), (.running, .exited(afterStop: false, _)): return true
        case (.exited, .finalized): return true
        default: return false
        }
    }
}

/// How a worker process ended, as the reaper read it (its wait status and rusage).
package struct WorkerExit: Sendable, Equatable {
    package var pid: Int32
    /// Exit status, or the signal number when `signaled`.
    package var code: Int32
    package var signaled: Bool
    /// Peak resident size in bytes.
    package var maxRSS: Int
    /// CPU time it used, user and system, in microseconds.
    package var cpuMicroseconds: Int64

    package init(pid: Int32, code: Int32, signaled: Bool, maxRSS: Int = 0, cpuMicroseconds: Int64 = 0) {
        self.pid = pid
        self.code = code
        self.signaled = signaled
        self.maxRSS = maxRSS
        self.cpuMicroseconds = cpuMicroseconds
    }
}

/// A phase enum whose legal moves are one table.
package protocol Phase: Equatable, CustomStringConvertible {
    static func allows(from: Self, to: Self) -> Bool
}

extension PluginPhase: Phase {}
extension WorkerPhase: Phase {}
