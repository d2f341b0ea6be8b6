import CSupervisorSupport
import IPC
#if canImport(Glibc)
import Glibc
#endif

/// Starts worker processes: a socketpair for the protocol, pipes for the plugin's stdout and stderr,
/// and posix_spawn (no code of ours runs in the child between fork and exec).
public enum WorkerSpawner {
    /// The supervisor's ends of a freshly spawned worker. The caller owns the three descriptors.
    public struct Spawned: Sendable {
        public var pid: pid_t
        public var socket: Int32
        public var stdout: Int32
        public var stderr: Int32
    }

    /// The environment a worker gets: nothing of the supervisor's. The Swift runtime's crash
    /// backtracer is off: it would try to exec a helper (fatal under the sandbox) and to suspend
    /// threads with signals the worker reserves; a crash must simply end the worker.
    static let environment = ["PATH=/usr/bin:/bin", "SWIFT_BACKTRACE=enable=no"]

    /// `extraEnvironment` entries (`NAME=value`) are added to the fixed `environment`.
    public static func spawn(executable: String, arguments: [String], extraEnvironment: [String] = []) throws(SystemError) -> Spawned {
        var pair: [Int32] = [-1, -1]
        _ = try syscallRetrying("socketpair") {
            socketpair(AF_UNIX, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0, &pair)
        }
        var out: [Int32] = [-1, -1]
        var err: [Int32] = [-1, -1]
        var toClose = [pair[0], pair[1]]
        defer { for fd in toClose { close(fd) } }
        var rc = css_pipe_cloexec(&out)
        guard rc == 0 else { throw SystemError(call: "pipe2", errno: -rc) }
        toClose += out
        rc = css_pipe_cloexec(&err)
        guard rc == 0 else { throw SystemError(call: "pipe2", errno: -rc) }
        toClose += err
        // The child's ends must not already sit on 0-3, or dup2 would keep them close-on-exec.
        let childSocket = try lifted(pair[1]); toClose.append(childSocket)
        let childOut = try lifted(out[1]); toClose.append(childOut)
        let childErr = try lifted(err[1]); toClose.append(childErr)

        var pid: pid_t = 0
        let argv = [executable] + arguments
        rc = withCStrings(argv) { cArgs in
            withCStrings(environment + extraEnvironment) { cEnv in
                css_spawn_worker(executable, cArgs, cEnv, childSocket, childOut, childErr, &pid)
            }
        }
        guard rc == 0 else { throw SystemError(call: "posix_spawn", errno: rc, context: executable) }
        // Keep the parent's ends; close everything else.
        toClose.removeAll { $0 == pair[0] || $0 == out[0] || $0 == err[0] }
        return Spawned(pid: pid, socket: pair[0], stdout: out[0], stderr: err[0])
    }

    private static func lifted(_ fd: Int32) throws(SystemError) -> Int32 {
        if fd > 3 { return fd }
        return try syscallRetrying("fcntl(F_DUPFD_CLOEXEC)") { fcntl(fd, F_DUPFD_CLOEXEC, 10) }
    }

    private static func withCStrings<R>(_ strings: [String], _ body: (UnsafePointer<UnsafeMutablePointer<CChar>?>) -> R) -> R {
        let pointers = strings.map { strdup($0) } + [nil]
        defer { for p in pointers { free(p) } }
        return pointers.withUnsafeBufferPointer { body($0.baseAddress!) }
    }
}
