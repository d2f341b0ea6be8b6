import CLinuxSupport
import PluginProtocol
import Synchronization
#if canImport(Glibc)
import Glibc
#endif

/// How a child process ended.
public struct ChildExit: Sendable, Equatable {
    public var pid: pid_t
    /// Exit status, or the signal number when `signaled`.
    public var code: Int32
    public var signaled: Bool
    /// Peak resident size in bytes (from the child's rusage).
    public var maxRSS: Int = 0
    /// CPU time it used, user and system, in microseconds (from the same rusage).
    public var cpuMicroseconds: Int64 = 0

    public init(pid: pid_t, code: Int32, signaled: Bool, maxRSS: Int = 0, cpuMicroseconds: Int64 = 0) {
        self.pid = pid
        self.code = code
        self.signaled = signaled
        self.maxRSS = maxRSS
        self.cpuMicroseconds = cpuMicroseconds
    }

    public var signalName: String { LifecycleSignals.name(code) }
}

/// A child process, named by a pidfd rather than its pid: signals and waits reach exactly this
/// process even after its pid is reused. Closes the pidfd when the last reference goes.
public final class ChildProcess: Sendable {
    public let pid: pid_t
    let pidfd: Int32

    init(pid: pid_t, pidfd: Int32) {
        self.pid = pid
        self.pidfd = pidfd
    }

    /// A child this process made before it exec'd a new binary in place (an upgrade): its pid and
    /// the pidfd handed over, which still names it whatever happened to the pid.
    public static func adopt(pid: pid_t, pidfd: consuming OwnedDescriptor) -> ChildProcess {
        ChildProcess(pid: pid, pidfd: pidfd.release())
    }

    /// The pidfd, to hand to the binary an upgrade execs (it stays open: this object keeps it).
    public var descriptor: Int32 { pidfd }

    /// pidfd_send_signal. False when the process has already been reaped.
    @discardableResult
    public func signal(_ sig: Int32) -> Bool { cls_pidfd_signal(pidfd, sig) == 0 }

    /// Whether the process has ended (its pidfd is readable), reaped or not. One poll, no wait.
    public var hasEnded: Bool { hasEnded(within: 0) }

    /// Whether it has ended, waiting up to `milliseconds` for it to (poll on the pidfd).
    public func hasEnded(within milliseconds: Int32) -> Bool {
        var entry = pollfd(fd: pidfd, events: Int16(POLLIN), revents: 0)
        return poll(&entry, 1, milliseconds) > 0
    }

    /// Blocks until the process ends and reaps it (waitid on the pidfd).
    public func wait() throws(SystemError) -> ChildExit {
        guard let exit = try reap(blocking: true) else {
            throw SystemError(call: "waitid", errno: EAGAIN, context: "pid \(pid)")
        }
        return exit
    }

    /// Reaps the process if it has ended (nil while it runs, or `blocking` waits).
    public func reap(blocking: Bool) throws(SystemError) -> ChildExit? {
        var code: Int32 = 0, signaled: Int32 = 0, maxRSSKB = 0, cpu: Int64 = 0
        let rc = cls_pidfd_wait(pidfd, blocking ? 0 : 1, &code, &signaled, &maxRSSKB, &cpu)
        if rc < 0 { throw SystemError(call: "waitid(P_PIDFD)", errno: -rc, context: "pid \(pid)") }
        if rc == 0 { return nil }
        return ChildExit(pid: pid, code: code, signaled: signaled != 0, maxRSS: maxRSSKB * 1024, cpuMicroseconds: cpu)
    }

    deinit { _ = Glibc.close(pidfd) }
}

/// A freshly spawned child and the parent's ends of its descriptors.
@frozen public struct SpawnedChild: ~Copyable {
    public let process: ChildProcess
    /// The parent's end of the socketpair that is descriptor 3 in the child.
    public var socket: OwnedDescriptor
    public var stdout: OwnedDescriptor
    public var stderr: OwnedDescriptor
    /// The parent's end of the second socketpair, the descriptor channel (descriptor 4 in the
    /// child), when asked for: a worker sends its seccomp listener over it, the supervisor its
    /// cgroup word and peer links.
    public var descriptorChannel: OwnedDescriptor?
    /// The parent's end of the third socketpair, the payload channel (descriptor 5 in the child),
    /// when asked for: the sealed memfds of bytes attached to messages, both ways (docs/protocol.md
    /// "Bytes"), one `sendmsg` of one byte with its descriptors just before the message.
    public var payloadChannel: OwnedDescriptor?
    /// Forked by the fork server (else exec'd).
    public var forked = false
}

/// Starts helper processes (workers, the installer): a socketpair that becomes descriptor 3 in the
/// child, pipes for its stdout and stderr, posix_spawn (no code of ours runs between fork and exec)
/// and a pidfd for it.
public enum Spawner {
    /// The environment a child gets: nothing of ours. The Swift runtime's crash backtracer is off:
    /// it would try to exec a helper (fatal under the sandbox) and to suspend threads with signals the
    /// worker reserves; a crash must simply end the process. libdispatch's own log is off: it
    /// writes to syslog through `/dev/log`, a socket the sandbox refuses, and in every Swift worker
    /// it logs at start that its pool threads could not raise their priority (`setpriority`,
    /// `EACCES` without `CAP_SYS_NICE`): three refused `socket` calls, each a round trip to the
    /// supervisor's seccomp notifier on the worker's way to `startup`, and three `sandboxDenials`
    /// the plugin never made (docs/sandbox.md, "Violations and denials").
    public static let baseEnvironment = ["PATH=/usr/bin:/bin", "SWIFT_BACKTRACE=enable=no", "LIBDISPATCH_LOG=NO"]

    /// Where a child told to start in namespaces of its own learns why it did not:
    /// `SP_ISOLATION_REFUSED=<why>` in its environment.
    public static let isolationRefusedVariable = "SP_ISOLATION_REFUSED"

    /// `extraEnvironment` entries (`NAME=value`) are added to `baseEnvironment`. With
    /// `descriptorChannel`, the child also gets descriptor 4, a second socket (see `SpawnedChild.descriptorChannel`);
    /// with `payloadChannel`, descriptor 5, a third (`SpawnedChild.payloadChannel`); with it and
    /// `takenPage` (the caller's descriptor, left open), descriptor 6, the worker's taken page.
    /// With `isolated`, it starts in new user and PID namespaces (`cls_spawn_isolated`); a
    /// host that refuses them gets an ordinary spawn, with `isolationRefusedVariable` saying why.
    /// With `forkServer`, the fork server forks it (the same descriptors, environment and
    /// namespaces; `executable` is not run): a failure there is thrown, and when the server's
    /// channel failed (`forkServer.isBroken`) the caller should stop using it. `emptyNetwork` (with
    /// `isolated` and `forkServer`): the child may start in an empty network namespace the fork
    /// server made ahead (FS_EMPTY_NETWORK); only for a worker that is to have one anyway.
    public static func spawn(executable: String, arguments: [String] = [], extraEnvironment: [String] = [],
                             descriptorChannel: Bool = false, payloadChannel: Bool = false, takenPage: Int32 = -1, isolated: Bool = false,
                             emptyNetwork: Bool = false, forkServer: ForkServerConnection? = nil) throws(SystemError) -> SpawnedChild {
        let pair = try SocketPair()
        let socket = pair.parent, childSocket = pair.child
        let channel = try ExtraChannel(descriptorChannel)
        let childChannelFD = channel.childFD
        let payloads = try ExtraChannel(payloadChannel)
        let childPayloadFD = payloads.childFD
        let out = try Pipe()
        let err = try Pipe()
        // The child's ends must not already sit on 0-6, or dup2 would keep them close-on-exec (or
        // write one over another).
        let childSocketFD = try lifted(childSocket)
        let childOut = try lifted(out.write)
        let childErr = try lifted(err.write)
        // The caller's: copied above the child's 0-6 only when it sits where a dup2 could write over it.
        let copiedPage = takenPage >= 0 && takenPage <= 6 ? try syscallRetrying("fcntl(F_DUPFD_CLOEXEC)") { fcntl(takenPage, F_DUPFD_CLOEXEC, 10) } : -1
        defer { if copiedPage >= 0 { close(copiedPage) } }
        let childPageFD = payloadChannel ? (copiedPage >= 0 ? copiedPage : takenPage) : -1

        var pid: pid_t = 0
        var pidfd: Int32 = -1
        let argv = [executable] + arguments
        var environment = baseEnvironment + extraEnvironment
        var said = ""
        /// Starts the child one way or the other: 0, or an errno value.
        func launch(isolated: Bool) -> Int32 {
            if let forkServer {
                return forkServer.spawn(environment: environment, socket: childSocketFD.raw, descriptorChannel: childChannelFD,
                                        payloadChannel: childPayloadFD, takenPage: childPageFD, stdout: childOut.raw,
                                        stderr: childErr.raw, isolated: isolated, emptyNetwork: emptyNetwork, pid: &pid, pidfd: &pidfd, message: &said)
            }
            return withCStrings(argv) { cArgs in
                withCStrings(environment) { cEnv in
                    isolated
                        ? cls_spawn_isolated(executable, cArgs, cEnv, childSocketFD.raw, childChannelFD, childPayloadFD, childPageFD, childOut.raw, childErr.raw, &pid, &pidfd)
                        : cls_spawn(executable, cArgs, cEnv, childSocketFD.raw, childChannelFD, childPayloadFD, childPageFD, childOut.raw, childErr.raw, &pid, &pidfd)
                }
            }
        }
        var rc: Int32 = 0
        if isolated {
            rc = launch(isolated: true)
            guard rc != 0 else {
                return SpawnedChild(process: ChildProcess(pid: pid, pidfd: pidfd), socket: socket, stdout: out.read, stderr: err.read,
                                    descriptorChannel: channel.parent, payloadChannel: payloads.parent, forked: forkServer != nil)
            }
            if let forkServer, forkServer.isBroken { throw SystemError(call: "the fork server", errno: rc, context: said) }
            // The namespaces were refused (not the executable: that would fail below too).
            environment.append("\(isolationRefusedVariable)=clone(CLONE_NEWUSER|CLONE_NEWPID) or the new namespaces' set-up failed: \(String(cString: strerror(rc)))")
        }
        rc = launch(isolated: false)
        guard rc == 0 else {
            if forkServer != nil { throw SystemError(call: "the fork server", errno: rc, context: said) }
            throw SystemError(call: "posix_spawn", errno: rc, context: executable)
        }
        // The child's ends close here, as their owners go; the parent keeps its own.
        return SpawnedChild(process: ChildProcess(pid: pid, pidfd: pidfd), socket: socket, stdout: out.read, stderr: err.read,
                            descriptorChannel: channel.parent, payloadChannel: payloads.parent, forked: forkServer != nil)
    }

    /// A connected pair of close-on-exec stream sockets: the parent's end and the child's.
    private struct SocketPair: ~Copyable {
        var parent: OwnedDescriptor
        var child: OwnedDescriptor

        init() throws(SystemError) {
            var fds: [Int32] = [-1, -1]
            _ = try syscallRetrying("socketpair") {
                socketpair(AF_UNIX, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0, &fds)
            }
            parent = OwnedDescriptor(fds[0])
            child = OwnedDescriptor(fds[1])
        }
    }

    /// One more channel to the child, if wanted (the descriptor channel, the payload channel): a
    /// socket pair, the parent's end and the child's moved above 5 (`lifted`); none otherwise.
    private struct ExtraChannel: ~Copyable {
        var parent: OwnedDescriptor?
        var child: OwnedDescriptor?

        init(_ wanted: Bool) throws(SystemError) {
            guard wanted else {
                parent = nil
                child = nil
                return
            }
            let pair = try SocketPair()
            parent = .some(pair.parent)
            child = .some(try lifted(pair.child))
        }

        /// The child's end's number, or -1 when there is none (the child gets no such channel).
        var childFD: Int32 {
            switch child {
            case .some(let fd): fd.raw
            case .none: -1
            }
        }
    }

    /// pipe2(O_CLOEXEC)'s two ends.
    private struct Pipe: ~Copyable {
        var read: OwnedDescriptor
        var write: OwnedDescriptor

        init() throws(SystemError) {
            var fds: [Int32] = [-1, -1]
            try ProcessControl.check("pipe2", cls_pipe_cloexec(&fds))
            read = OwnedDescriptor(fds[0])
            write = OwnedDescriptor(fds[1])
        }
    }

    static func lifted(_ fd: consuming OwnedDescriptor) throws(SystemError) -> OwnedDescriptor {
        if fd.raw > 6 { return fd }
        let raw = fd.raw
        return OwnedDescriptor(try syscallRetrying("fcntl(F_DUPFD_CLOEXEC)") { fcntl(raw, F_DUPFD_CLOEXEC, 10) })
    }

    /// `body` with `strings` as a NULL-terminated array of C strings (argv, envp).
    public static func withCStrings<R>(_ strings: [String], _ body: (UnsafePointer<UnsafeMutablePointer<CChar>?>) -> R) -> R {
        let pointers = strings.map { strdup($0) } + [nil]
        defer { for p in pointers { free(p) } }
        return pointers.withUnsafeBufferPointer { body($0.baseAddress!) }
    }
}

/// Observes children's exits the moment they happen: one thread in epoll_wait over their pidfds (no
/// polling, no SIGCHLD, no wait for "any child"), reaping each with waitid(P_PIDFD) and its rusage.
/// The callback runs on that thread; the supervisor hands it straight to its event loop.
public final class ChildWatcher: Sendable {
    private let epoll: EpollSet
    private let watched = Guarded<[Int32: (ChildProcess, @Sendable (ChildExit) -> Void)]>([:])

    public init() throws(SystemError) {
        epoll = try EpollSet()
        Threads.start(name: "child-watcher") { [self] in run() }
    }

    /// Ends the watching thread (the supervisor has stopped; children not reaped by then are
    /// reported no more).
    public func stop() { epoll.stop() }

    /// Calls `onExit` once `child` has ended and been reaped.
    public func watch(_ child: ChildProcess, onExit: @escaping @Sendable (ChildExit) -> Void) throws(SystemError) {
        watched.withLock { $0[child.pidfd] = (child, onExit) }
        let rc = epoll.add(child.pidfd)
        if rc < 0 {
            watched.withLock { _ = $0.removeValue(forKey: child.pidfd) }
            throw SystemError(call: "epoll_ctl(EPOLL_CTL_ADD)", errno: -rc, context: "pid \(child.pid)")
        }
    }

    private func run() {
        var ready = [Int32](repeating: -1, count: 16)
        while let n = epoll.wait(into: &ready) {
            for i in 0..<n {
                let fd = ready[i]
                guard let (child, onExit) = watched.withLock({ $0[fd] }) else { continue }
                let exit: ChildExit
                do {
                    guard let ended = try child.reap(blocking: false) else { continue }
                    exit = ended
                } catch {
                    // Reaped by someone else (it cannot be by us): report it ended, cause unknown.
                    exit = ChildExit(pid: child.pid, code: 255, signaled: false)
                }
                epoll.remove(fd)
                watched.withLock { _ = $0.removeValue(forKey: fd) }
                onExit(exit)
            }
        }
    }
}
