import LinuxSupport

/// The system paths a sandboxed process may read (docs/sandbox.md): the worker's Landlock rules
/// hold them, and the installer's too (its preflight worker runs within both).
public enum SandboxPaths {
    /// What a plugin with the `network` permission also needs to read: name resolution and TLS roots.
    public static let networkReadOnly = [
        "/etc/resolv.conf", "/etc/hosts", "/etc/host.conf", "/etc/nsswitch.conf", "/etc/gai.conf", "/etc/ssl",
        "/etc/ca-certificates", "/usr/share/ca-certificates",
    ]

    /// Folders every worker may read: the system's and the Swift runtime's libraries, and what the
    /// C library, Dispatch and Foundation read at run time. `/proc` is needed whole: Dispatch's
    /// thread-pool monitor reads `/proc/<tid>/stat` of its own threads and crashes when it cannot.
    /// Other processes' sensitive entries (`mem`, `environ`, `maps`, `fd/`) stay closed: they need
    /// ptrace access, which Landlock refuses outside the worker's own domain, and every process of
    /// ours is non-dumpable.
    public static let systemReadOnly = [
        "/usr/lib", "/lib", "/lib64", "/usr/lib64", "/usr/local/lib", "/etc/ld.so.cache", "/etc/localtime",
        "/usr/share/zoneinfo", "/sys/devices/system/cpu", "/dev/urandom", "/proc",
        // OpenSSL reads its config at initialisation (OPENSSL_INIT_LOAD_CONFIG; Debian's OPENSSLDIR
        // /usr/lib/ssl links to it): the system's TLS settings, no secret in it.
        "/etc/ssl/openssl.cnf",
        // Allocators and runtimes (Go, jemalloc) size their pages from it: a kernel constant.
        "/sys/kernel/mm/transparent_hugepage",
    ]

    /// Files of the worker's own cgroup that runtimes read to size their thread pools and heaps
    /// (Go, the JVM, .NET, Rust's available_parallelism): only these, never the tree, whose
    /// `cgroup.procs` would list other processes.
    public static let cgroupFiles = [
        "cpu.max", "cpu.weight", "cpuset.cpus.effective", "memory.max", "memory.high",  // v2
        "cpu.cfs_quota_us", "cpu.cfs_period_us", "cpu.shares", "memory.limit_in_bytes",  // v1
    ]

    /// The folders of this process's cgroups, from /proc/self/cgroup: v2's unified path, and v1's per
    /// controller (for `cpu` and `memory`).
    public static func ownCgroupFolders() -> [String] {
        guard let text = try? FileSystem.readFile("/proc/self/cgroup", limit: 64 << 10) else { return [] }
        var folders: [String] = []
        for line in String(decoding: text, as: UTF8.self).split(separator: "\n") {
            let parts = line.split(separator: ":", maxSplits: 2, omittingEmptySubsequences: false)
            guard parts.count == 3 else { continue }
            let controllers = parts[1], path = parts[2] == "/" ? "" : String(parts[2])
            if controllers.isEmpty {
                folders.append("/sys/fs/cgroup" + path)
            } else if controllers.split(separator: ",").contains(where: { $0 == "cpu" || $0 == "memory" }) {
                folders.append("/sys/fs/cgroup/" + controllers + path)
            }
        }
        return folders
    }
}
