import Logging
import LinuxSupport
import NIOCore
import SupervisorCore

// The core counts time in `Instant`s of the monotonic clock, which NIO's deadlines read too: the
// driver converts at the edge, and reads the clock for the core's inputs.
extension NIODeadline {
    var instant: Instant { Instant(nanoseconds: uptimeNanoseconds) }
}

extension Instant {
    /// The monotonic clock now.
    static var now: Instant { NIODeadline.now().instant }

    var deadline: NIODeadline { .uptimeNanoseconds(nanoseconds) }
}

extension Logger.Level {
    init(_ level: LogLevel) {
        switch level {
        case .trace: self = .trace
        case .debug: self = .debug
        case .info: self = .info
        case .notice: self = .notice
        case .warning: self = .warning
        case .error: self = .error
        case .critical: self = .critical
        }
    }
}

extension WorkerExit {
    /// The reaper's account of a child's end.
    init(_ exit: ChildExit) {
        self.init(pid: exit.pid, code: exit.code, signaled: exit.signaled, maxRSS: exit.maxRSS, cpuMicroseconds: exit.cpuMicroseconds)
    }
}
