import CLinuxSupport
import Synchronization
#if canImport(Glibc)
import Glibc
#endif

/// Why the fork server could not be started or used.
public struct ForkServerError: Error, CustomStringConvertible, Sendable {
    public var description: String
    public init(_ description: String) { self.description = description }
}

/// The fork server (`plugin-forkserver`, Sources/ForkServer; docs/sandbox.md "The fork server"):
/// a C process that has loaded the worker's code once and forks each worker from itself, so a
/// worker starts without an exec and without the Swift runtime loading again. Its children are
/// this process's own (it forks them with CLONE_PARENT): a worker it starts is a `ChildProcess`
/// like any other, watched, signalled and reaped here.
///
/// Launched, then ready once `awaitReady` returns (on any thread); from then on used from one thread
/// at a time (the supervisor's event loop): a request and its answer are one exchange on one
/// socket. Once the channel fails (`isBroken`), it is never used again.
public final class ForkServerConnection: Sendable {
    public let process: ChildProcess
    private let channel: Int32
    private let broken = Atomic<Bool>(false)
    public var pid: pid_t { process.pid }

    /// Whether the channel failed (no answer in time, the server gone, an answer not its own).
    public var isBroken: Bool { broken.load(ordering: .relaxed) }

    /// Spare entries in the fork server's environment: a worker's environment is at most this long
    /// plus four (a longer one is exec'd).
    static let environmentSlots = 24

    /// How long one request may take (a fork is a fraction of a millisecond).
    public static let requestTimeoutMs: Int32 = 5_000

    private init(process: ChildProcess, channel: Int32) {
        self.process = process
        self.channel = channel
    }

    /// Starts `executable`, which loads `library` (libPluginWorkerCore.so); its output goes to this
    /// process's stderr. It is not ready until `awaitReady` says so. `emptyNetworks`: how many empty
    /// network namespaces it makes ahead while idle, for requests with `emptyNetwork` (0: none).
    public static func launch(executable: String, library: String, emptyNetworks: Int = 0) throws(ForkServerError) -> ForkServerConnection {
        var fds: [Int32] = [-1, -1]
        let rc = cls_seqpacket_pair(&fds)
        guard rc == 0 else { throw ForkServerError("socketpair(SOCK_SEQPACKET) failed: \(String(cString: strerror(-rc)))") }
        let mine = OwnedDescriptor(fds[0])
        // The child's ends above 3 (cls_spawn's rule): its socket, and a copy of our stderr.
        let theirs = try described { () throws(SystemError) in try Spawner.lifted(OwnedDescriptor(fds[1])) }
        let output = try described { () throws(SystemError) in
            OwnedDescriptor(try syscallRetrying("fcntl(F_DUPFD_CLOEXEC)") { fcntl(2, F_DUPFD_CLOEXEC, 10) })
        }
        var pid: pid_t = 0, pidfd: Int32 = -1
        // argv[0] alone (a worker writes its name over it); what it needs in its environment, and
        // room there for each worker's (see Sources/ForkServer/main.c).
        let environment = Spawner.baseEnvironment + ["SP_FORKSERVER_LIBRARY=\(library)", "SP_FORKSERVER_PARENT=\(getpid())",
                                                     "SP_FORKSERVER_NETNS=\(emptyNetworks)"]
            + Array(repeating: "SP_FORKSERVER_SLOT=", count: environmentSlots)
        let spawned = Spawner.withCStrings([executable]) { cArgs in
            Spawner.withCStrings(environment) { cEnv in
                cls_spawn(executable, cArgs, cEnv, theirs.raw, -1, -1, -1, output.raw, output.raw, &pid, &pidfd)
            }
        }
        guard spawned == 0 else { throw ForkServerError("cannot start \(executable): \(String(cString: strerror(spawned)))") }
        // The child's ends close here; ours belongs to the ForkServerConnection from now on.
        return ForkServerConnection(process: ChildProcess(pid: pid, pidfd: pidfd), channel: mine.release())
    }

    /// Waits (blocking) for its first answer: ready, with how long loading the worker's code took
    /// (microseconds), or why it cannot serve. On failure it is ended (the watcher, or the caller,
    /// reaps it).
    public func awaitReady(timeoutMs: Int32 = 10_000) throws(ForkServerError) -> Int {
        var reply = fs_reply()
        var message = [CChar](repeating: 0, count: 512)
        let read = cls_forkserver_read(channel, timeoutMs, &reply, &message, message.count)
        guard read == 0, reply.error == 0 else {
            stop()
            if read != 0 {
                throw ForkServerError("it did not say it was ready within \(timeoutMs) ms: \(String(cString: strerror(-read)))")
            }
            throw ForkServerError(Self.text(message))
        }
        return Int(reply.micros)
    }

    /// Asks for a worker: its whole environment and its descriptors (see cls_forkserver_spawn).
    /// 0 with `pid` and `pidfd` set, or an errno value with `message` saying why; afterwards
    /// `isBroken` tells whether the failure was this request's or the channel's.
    func spawn(environment: [String], socket: Int32, descriptorChannel: Int32, payloadChannel: Int32, takenPage: Int32, stdout: Int32, stderr: Int32, isolated: Bool, emptyNetwork: Bool,
               pid: inout pid_t, pidfd: inout Int32, message: inout String) -> Int32 {
        guard !isBroken else {
            message = "the fork server is no longer used"
            return EPIPE
        }
        var text = [CChar](repeating: 0, count: 512)
        var forkUs: Int64 = 0
        let rc = Spawner.withCStrings(environment) { cEnv in
            cls_forkserver_spawn(channel, cEnv, socket, descriptorChannel, payloadChannel, takenPage, stdout, stderr, isolated ? 1 : 0, emptyNetwork ? 1 : 0, Self.requestTimeoutMs,
                                 &pid, &pidfd, &forkUs, &text, text.count)
        }
        if rc < 0 {
            broken.store(true, ordering: .relaxed)
            message = "the fork server (pid \(process.pid)) did not answer: \(String(cString: strerror(-rc)))"
            return -rc
        }
        if rc > 0 {
            let said = Self.text(text)
            message = said.isEmpty ? String(cString: strerror(rc)) : "\(said): \(String(cString: strerror(rc)))"
        }
        return rc
    }

    /// A system call's failure as the fork server's.
    private static func described<T: ~Copyable>(_ body: () throws(SystemError) -> T) throws(ForkServerError) -> T {
        do { return try body() } catch { throw ForkServerError("\(error)") }
    }

    /// A NUL-terminated C buffer's text.
    private static func text(_ buffer: [CChar]) -> String {
        String(decoding: buffer.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
    }

    /// Ends it (it is reaped by whoever watches `process`); never used again.
    public func stop() {
        broken.store(true, ordering: .relaxed)
        process.signal(SIGKILL)
    }

    deinit { close(channel) }
}
