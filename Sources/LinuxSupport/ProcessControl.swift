import CLinuxSupport
#if canImport(Glibc)
import Glibc
#endif

/// prctl and other calls about the current process (each wraps one C helper of CLinuxSupport).
public enum ProcessControl {
    /// prctl(PR_SET_PDEATHSIG, signal): this process gets `signal` when its parent ends.
    public static func dieWithParent(signal: Int32 = SIGKILL) throws(SystemError) {
        try check("prctl(PR_SET_PDEATHSIG)", cls_set_parent_death_signal(signal))
    }

    /// prctl(PR_SET_NO_NEW_PRIVS, 1).
    public static func setNoNewPrivileges() throws(SystemError) {
        try check("prctl(PR_SET_NO_NEW_PRIVS)", cls_set_no_new_privs())
    }

    /// prctl(PR_SET_DUMPABLE, 0): no core dumps, and same-uid peers (workers) cannot ptrace this
    /// process or read its memory.
    public static func setNotDumpable() throws(SystemError) {
        try check("prctl(PR_SET_DUMPABLE)", cls_set_not_dumpable())
    }

    /// Closes every descriptor from `first` up, except those in `keep` (close_range).
    public static func closeDescriptors(from first: Int32, except keep: [Int32]) throws(SystemError) {
        try check("close_range", keep.withUnsafeBufferPointer { cls_close_descriptors_from(first, $0.baseAddress, Int32($0.count)) })
    }

    /// pipe2(O_CLOEXEC): the reading and the writing end, the writing one non-blocking.
    public static func wakeUpPipe() throws(SystemError) -> (read: Int32, write: Int32) {
        var fds: [Int32] = [-1, -1]
        try check("pipe2", cls_pipe_cloexec(&fds))
        _ = fcntl(fds[1], F_SETFL, fcntl(fds[1], F_GETFL) | O_NONBLOCK)
        return (fds[0], fds[1])
    }

    /// RLIMIT_NOFILE: raises the soft limit to `wanted` (as far as the hard limit allows; never
    /// lowers it) and returns both as they are then.
    public static func openFilesLimit(raisingTo wanted: Int) -> (soft: Int, hard: Int) {
        let resource = __rlimit_resource_t(RLIMIT_NOFILE.rawValue)
        // rlim_t.max is RLIM_INFINITY.
        var limit = rlimit()
        guard getrlimit(resource, &limit) == 0 else { return (Int.max, Int.max) }
        let want = rlim_t(max(0, wanted))
        if limit.rlim_cur != rlim_t.max, limit.rlim_cur < want {
            var raised = limit
            raised.rlim_cur = limit.rlim_max == rlim_t.max ? want : min(want, limit.rlim_max)
            if setrlimit(resource, &raised) == 0 { limit = raised }
        }
        func count(_ value: rlim_t) -> Int { value == rlim_t.max || value > rlim_t(Int.max) ? Int.max : Int(value) }
        return (count(limit.rlim_cur), count(limit.rlim_max))
    }

    /// CLOCK_MONOTONIC in microseconds (the same clock NIODeadline and DispatchTime read).
    public static func monotonicMicroseconds() -> Int64 { cls_monotonic_us() }

    /// Which network namespace this process is in (the inode of /proc/self/ns/net, unique among
    /// the namespaces alive), or nil when /proc does not say.
    public static func networkNamespace() -> UInt64? {
        var st = stat()
        return stat("/proc/self/ns/net", &st) == 0 ? UInt64(st.st_ino) : nil
    }

    /// The paths of the shared objects loaded in this process, as the dynamic loader names them.
    public static func loadedObjects() -> [String] {
        var buffer = [CChar](repeating: 0, count: 64 << 10)
        let count = cls_loaded_objects(&buffer, buffer.count)
        return buffer.withUnsafeBytes { raw in
            raw.prefix(count).split(separator: UInt8(ascii: "\n")).map { String(decoding: $0, as: UTF8.self) }
        }
    }

    /// CLOCK_MONOTONIC in nanoseconds.
    public static func monotonicNanoseconds() -> Int64 { cls_monotonic_ns() }

    /// Whether the caller is the process's main thread (its thread id is the pid).
    public static var isMainThread: Bool { cls_thread_id() == getpid() }

    /// How many threads this process has (/proc/self/stat).
    public static func threadCount() throws(SystemError) -> Int {
        let n = cls_thread_count()
        if n < 0 { throw SystemError(call: "read", errno: -n, context: "/proc/self/stat") }
        return Int(n)
    }

    /// The Landlock ABI version the kernel offers, or nil when it has none.
    public static func landlockABI() -> Int? {
        let abi = cls_landlock_abi()
        return abi > 0 ? Int(abi) : nil
    }

    /// Why the kernel offers no Landlock (strerror of landlock_create_ruleset's failure).
    public static func landlockUnavailableReason() -> String {
        let abi = cls_landlock_abi()
        return abi > 0 ? "available" : String(cString: strerror(-abi))
    }

    /// A C helper's `0 or -errno` as a throw.
    @inline(__always)
    static func check(_ call: String, _ rc: Int32, context: String = "") throws(SystemError) {
        if rc < 0 { throw SystemError(call: call, errno: -rc, context: context) }
    }
}
