import CLinuxSupport
import Dispatch
import PluginProtocol
#if canImport(Glibc)
import Glibc
#endif

/// A system call a worker's seccomp filter handed to its supervisor instead of allowing it.
public struct SeccompCall: Sendable {
    /// The calling thread's id (in the supervisor's pid namespace).
    public var tid: UInt32
    public var nr: Int32
    /// The AUDIT_ARCH_* of the call (a foreign architecture's calls come here too).
    public var arch: UInt32
    public var args: [UInt64]

    public init(tid: UInt32, nr: Int32, arch: UInt32, args: [UInt64]) {
        self.tid = tid
        self.nr = nr
        self.arch = arch
        self.args = args
    }
}

/// What the supervisor says to a call.
public enum SeccompAnswer: Sendable {
    /// The call fails with this errno; the worker goes on.
    case fail(errno: Int32)
    /// The worker is killed (SIGKILL through its pidfd) before the call can go on.
    case kill
}

/// Answers for workers' seccomp filters (seccomp user notification): one thread in epoll_wait over
/// the channels on which workers send their filter's listener and over the listeners themselves.
/// Each call a filter hands over is put to that worker's `answer` closure, on this thread; the
/// closure hands whatever it records to the supervisor's event loop and returns at once.
///
/// A worker sends its listener right after loading its filter and before its plugin loads; until
/// the listener arrives, a call that needs an answer simply waits. The registration ends when no
/// task uses the filter any more (the worker has been reaped).
public final class SeccompNotifier: Sendable {
    private struct Registration {
        let process: ChildProcess
        let answer: @Sendable (SeccompCall) -> SeccompAnswer
        /// False while `fd` is the channel the listener will come on, true once it is the listener.
        let isListener: Bool
    }

    private let epoll: EpollSet
    private let registered = Guarded<[Int32: Registration]>([:])
    /// Set by `handOver`: the thread ends without closing what it holds, and says so.
    private let handingOver = Guarded<DispatchSemaphore?>(nil)

    public init() throws(SystemError) {
        epoll = try EpollSet()
        Threads.start(name: "seccomp-notify") { [self] in run() }
    }

    /// Ends the answering thread and closes what it still holds (the supervisor has stopped: every
    /// worker has been reaped).
    public func stop() {
        // Handed over: its thread has ended and its epoll descriptors are closed already.
        guard handingOver.withLock({ $0 }) == nil else { return }
        epoll.stop()
    }

    /// Takes `channel` (the parent's end of the socket the worker sends its listener on) and answers
    /// the calls of `process`'s filter with `answer`.
    public func adopt(channel: consuming OwnedDescriptor, process: ChildProcess,
                      answer: @escaping @Sendable (SeccompCall) -> SeccompAnswer) throws(SystemError) {
        let fd = channel.release()
        try add(fd, Registration(process: process, answer: answer, isListener: false))
    }

    /// Answers `process`'s filter on `listener`, a listener handed over by the previous binary
    /// (`handOver`) after an upgrade in place.
    public func adopt(listener: consuming OwnedDescriptor, process: ChildProcess,
                      answer: @escaping @Sendable (SeccompCall) -> SeccompAnswer) throws(SystemError) {
        let fd = listener.release()
        try add(fd, Registration(process: process, answer: answer, isListener: true))
    }

    /// One descriptor this notifier holds for a worker, for the binary that takes over.
    public struct Held: Sendable {
        public var pid: pid_t
        public var fd: Int32
        /// The filter's listener (else the channel the listener has yet to come on).
        public var isListener: Bool
    }

    /// Ends the answering thread between two answers, without closing anything, and returns what
    /// it held, for an upgrade in place: no call is left received and unanswered (the worker would
    /// wait forever), and the listeners stay open for the next binary. The notifier is done after.
    public func handOver() -> [Held] {
        let done = DispatchSemaphore(value: 0)
        handingOver.withLock { $0 = done }
        epoll.stop()
        done.wait()
        return registered.withLock { r in
            defer { r = [:] }
            return r.map { Held(pid: $0.value.process.pid, fd: $0.key, isListener: $0.value.isListener) }
        }
    }

    private func add(_ fd: Int32, _ registration: Registration) throws(SystemError) {
        registered.withLock { $0[fd] = registration }
        let rc = epoll.add(fd)
        if rc < 0 {
            drop(fd)
            throw SystemError(call: "epoll_ctl(EPOLL_CTL_ADD)", errno: -rc, context: "pid \(registration.process.pid)")
        }
    }

    private func drop(_ fd: Int32) {
        epoll.remove(fd)
        registered.withLock { _ = $0.removeValue(forKey: fd) }
        _ = Glibc.close(fd)
    }

    private func run() {
        var ready = [Int32](repeating: -1, count: 32)
        var notification = cls_seccomp_notification()
        while let n = epoll.wait(into: &ready) {
            for i in 0..<n {
                let fd = ready[i]
                guard let registration = registered.withLock({ $0[fd] }) else { continue }
                if registration.isListener {
                    serve(fd, registration, &notification)
                } else {
                    takeListener(fd, registration)
                }
            }
        }
        if let handOver = handingOver.withLock({ $0 }) {
            handOver.signal()
            return
        }
        let left = registered.withLock { r in defer { r = [:] }; return Array(r.keys) }
        for fd in left { _ = Glibc.close(fd) }
    }

    /// The channel is readable: the listener (or the end of the stream: a worker without one, or
    /// one that ended first).
    private func takeListener(_ channel: Int32, _ registration: Registration) {
        var listener: Int32 = -1
        let rc = cls_receive_fd(channel, &listener)
        if rc == -EAGAIN || rc == -EINTR { return }
        drop(channel)
        guard rc == 1 else { return }
        do {
            try add(listener, Registration(process: registration.process, answer: registration.answer, isListener: true))
        } catch {
            // Nobody could answer its filter: the worker must not run on with calls that never return.
            registration.process.signal(SIGKILL)
        }
    }

    /// The listener is readable: answer the pending call, or drop it once no task uses the filter.
    private func serve(_ listener: Int32, _ registration: Registration, _ notification: inout cls_seccomp_notification) {
        let state = cls_seccomp_listener_state(listener)
        if state == 0 { return }
        if state < 0 { return drop(listener) }
        let rc = cls_seccomp_receive(listener, &notification)
        guard rc == 0 else {
            if rc == -ENOENT || rc == -EINTR { return }  // the task went away (or was interrupted) meanwhile
            return drop(listener)
        }
        let a = notification.args
        let call = SeccompCall(tid: notification.pid, nr: notification.nr, arch: notification.arch, args: [a.0, a.1, a.2, a.3, a.4, a.5])
        switch registration.answer(call) {
        case .fail(let errno):
            _ = cls_seccomp_respond_error(listener, notification.id, errno)
        case .kill:
            // Killed first, so the call never continues; the answer is then moot (ENOENT).
            registration.process.signal(SIGKILL)
            _ = cls_seccomp_respond_error(listener, notification.id, EPERM)
        }
    }
}
