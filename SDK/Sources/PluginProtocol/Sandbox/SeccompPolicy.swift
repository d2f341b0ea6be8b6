/// The system-call policy every worker runs under: default deny (EPERM), an allowlist for what the
/// worker, the Swift runtime, Foundation, Dispatch and a plugin's ordinary work need, conditional
/// rules where the arguments decide, and a list of dangerous calls that end the worker
/// (the supervisor names the call: seccomp user notification; without it SECCOMP_RET_TRAP and the
/// worker's SIGSYS reporter). docs/sandbox.md explains each group.
///
/// Kept as data so it can be reviewed in one place: the worker compiles it with libseccomp, and the
/// supervisor, which answers the calls the filter hands it, reads it to tell a violation (`trap`)
/// from a denial (EPERM, counted).
public enum SeccompPolicy {
    public enum Action: Equatable, Sendable {
        case allow
        case errno(Int32)
        /// Fatal: the worker reports the syscall and exits (recorded as `sandboxViolation`).
        case trap
    }

    /// A comparison on one argument (libseccomp's `scmp_arg_cmp`).
    public struct Condition: Equatable, Sendable {
        public enum Op: Equatable, Sendable { case equal, notEqual, greater, maskedEqual(mask: UInt64) }
        public var arg: UInt32
        public var op: Op
        public var value: UInt64

        /// Whether the call's arguments satisfy it (as the filter compares: all 64 bits).
        public func holds(_ args: [UInt64]) -> Bool {
            guard Int(arg) < args.count else { return false }
            let a = args[Int(arg)]
            switch op {
            case .equal: return a == value
            case .notEqual: return a != value
            case .greater: return a > value
            case .maskedEqual(let mask): return a & mask == value
            }
        }
    }

    public struct Rule: Equatable, Sendable {
        public var syscall: String
        public var action: Action
        /// All must hold (libseccomp ANDs the comparisons of one rule).
        public var conditions: [Condition] = []

        public init(syscall: String, action: Action, conditions: [Condition] = []) {
            self.syscall = syscall
            self.action = action
            self.conditions = conditions
        }
    }

    /// Plain allow, whatever the arguments.
    public static let allowed: [String] = [
        // I/O on descriptors the worker already has or opens within Landlock's rules
        "read", "write", "readv", "writev", "pread64", "pwrite64", "preadv", "pwritev", "preadv2", "pwritev2",
        "close", "close_range", "lseek", "fcntl", "flock", "dup", "dup2", "dup3", "pipe", "pipe2",
        "sendfile", "copy_file_range", "splice", "tee", "fadvise64", "fsync", "fdatasync", "sync_file_range",
        "ftruncate", "truncate", "fallocate",
        // files (Landlock decides which paths)
        "open", "openat", "creat", "stat", "fstat", "lstat", "newfstatat", "statx", "statfs", "fstatfs",
        "access", "faccessat", "faccessat2", "readlink", "readlinkat", "getdents", "getdents64", "getcwd",
        "chdir", "fchdir", "mkdir", "mkdirat", "rmdir", "unlink", "unlinkat", "rename", "renameat", "renameat2",
        "link", "linkat", "symlink", "symlinkat", "chmod", "fchmod", "fchmodat", "utimensat", "umask",
        "getxattr", "lgetxattr", "fgetxattr", "listxattr", "llistxattr", "flistxattr",
        "memfd_create", "inotify_init1", "inotify_add_watch", "inotify_rm_watch",
        // memory
        "mmap", "munmap", "mprotect", "mremap", "madvise", "brk", "msync", "mincore", "membarrier",
        // sockets (creation is restricted below; these act on existing ones)
        "connect", "bind", "listen", "accept", "accept4", "sendto", "recvfrom", "sendmsg", "recvmsg",
        "sendmmsg", "recvmmsg", "shutdown", "getsockname", "getpeername", "getsockopt", "setsockopt",
        // waiting and events
        "poll", "ppoll", "select", "pselect6", "epoll_create", "epoll_create1", "epoll_ctl", "epoll_wait",
        "epoll_pwait", "epoll_pwait2", "eventfd", "eventfd2", "timerfd_create", "timerfd_settime",
        "timerfd_gettime", "signalfd", "signalfd4",
        // time
        "clock_gettime", "clock_getres", "clock_nanosleep", "nanosleep", "gettimeofday", "time",
        // threads and scheduling (thread creation is `clone` below)
        "futex", "futex_waitv", "set_robust_list", "get_robust_list", "rseq", "set_tid_address", "sched_yield",
        "sched_getaffinity", "sched_setaffinity", "sched_getparam", "sched_getscheduler",
        "sched_get_priority_max", "sched_get_priority_min", "getpriority", "getcpu", "arch_prctl",
        // identity and limits (read-only)
        "getpid", "gettid", "getppid", "getuid", "geteuid", "getgid", "getegid", "getgroups", "getresuid",
        "getresgid", "getpgrp", "getpgid", "getsid", "uname", "sysinfo", "getrusage", "getrlimit", "times",
        "capget",
        // signals (SIGSYS is protected below)
        "rt_sigprocmask", "rt_sigreturn", "sigaltstack", "rt_sigtimedwait", "rt_sigpending", "rt_sigsuspend",
        "restart_syscall",
        // the end, randomness, more filters (a filter can only restrict further)
        "exit", "exit_group", "wait4", "waitid", "getrandom", "seccomp",
        // Timers (SQLite, CPython, Go's profiler, libcurl's timeouts): a POSIX timer or an interval
        // timer signals the calling process only (the kernel refuses a target thread of another
        // thread group for SIGEV_THREAD_ID).
        "timer_create", "timer_settime", "timer_gettime", "timer_getoverrun", "timer_delete",
        "setitimer", "getitimer", "alarm",
        // Locking its own pages in memory (OpenSSL's secure heap, crypto libraries): bounded by
        // RLIMIT_MEMLOCK, and it touches only this process's memory.
        "mlock", "mlock2", "munlock", "mlockall", "munlockall",
        // Waiting for a signal (`for (;;) pause();` in a worker's idle thread; `rt_sigsuspend`, its
        // newer form, is above), the old form of `inotify_init1`, reading this process's NUMA
        // policy and scheduling attributes, and reading ahead a file it has open: each touches only
        // this process, and a loop around one, refused, would be a flood of denials.
        "pause", "inotify_init", "get_mempolicy", "sched_getattr", "sched_rr_get_interval", "readahead",
    ]

    /// Calls that end the worker: process creation and replacement, other processes' memory, kernel
    /// attack surface, namespace and mount changes.
    public static let fatal: [String] = [
        "execve", "execveat", "fork", "vfork", "ptrace", "process_vm_readv", "process_vm_writev",
        "process_madvise", "pidfd_getfd", "kcmp", "bpf", "perf_event_open", "keyctl", "add_key", "request_key",
        "userfaultfd", "io_uring_setup", "io_uring_enter", "io_uring_register", "mount", "umount2", "unshare",
        "setns", "pivot_root", "chroot", "fsopen", "fsmount", "fspick", "move_mount", "open_tree",
        "mount_setattr", "kexec_load", "kexec_file_load", "init_module", "finit_module", "delete_module",
        "swapon", "swapoff", "reboot", "acct", "iopl", "ioperm", "open_by_handle_at", "quotactl",
        "lookup_dcookie",
    ]

    // Linux constants the conditional rules use.
    static let AF_UNIX: UInt64 = 1, AF_INET: UInt64 = 2, AF_INET6: UInt64 = 10
    static let CLONE_THREAD: UInt64 = 0x10000
    static let resetOnFork: UInt64 = 0x4000_0000
    static let SIGSYS: UInt64 = 31
    static let ENOSYS: Int32 = 38
    /// prctl options a plugin may use: PR_GET_DUMPABLE, PR_SET_NAME, PR_GET_NAME, PR_GET_SECCOMP,
    /// PR_CAPBSET_READ, PR_GET_TIMERSLACK, PR_GET_NO_NEW_PRIVS, PR_SET_VMA. (Not PR_SET_PDEATHSIG:
    /// a plugin must not be able to outlive the supervisor.)
    static let prctlOptions: [UInt64] = [3, 15, 16, 21, 23, 30, 39, 0x5356_4D41]
    /// ioctl requests a plugin may make: TCGETS, TIOCGWINSZ, FIONREAD, FIONBIO, FIONCLEX, FIOCLEX
    /// (never TIOCSTI).
    static let ioctlRequests: [UInt64] = [0x5401, 0x5413, 0x541B, 0x5421, 0x5450, 0x5451]

    /// The whole rule list for one worker.
    /// - Parameters:
    ///   - network: the manifest grants `network` (AF_UNIX, AF_INET and AF_INET6 sockets).
    ///   - pid: the worker's own pid (signals may only go to itself).
    ///   - notify: the supervisor answers for the filter (user notification): nothing traps, so the
    ///     SIGSYS reporter needs no protection and SIGSYS's action may be set like any other's.
    ///   - owner: the worker's uid and gid (a file's owner may "change" it to itself).
    public static func rules(network: Bool, pid: Int32, notify: Bool = false, owner: (uid: UInt32, gid: UInt32)? = nil) -> [Rule] {
        var rules = allowed.map { Rule(syscall: $0, action: .allow) }
        if notify { rules.append(Rule(syscall: "rt_sigaction", action: .allow)) }
        rules += fatal.map { Rule(syscall: $0, action: .trap) }
        func when(_ arg: UInt32, _ op: Condition.Op, _ value: UInt64) -> Condition { Condition(arg: arg, op: op, value: value) }
        let me = UInt64(UInt32(bitPattern: pid))
        rules += [
            // Threads only: a clone without CLONE_THREAD is a fork.
            Rule(syscall: "clone", action: .allow, conditions: [when(0, .maskedEqual(mask: CLONE_THREAD), CLONE_THREAD)]),
            Rule(syscall: "clone", action: .trap, conditions: [when(0, .maskedEqual(mask: CLONE_THREAD), 0)]),
            // clone3's flags live in memory seccomp cannot read: say ENOSYS so libc falls back to clone.
            Rule(syscall: "clone3", action: .errno(ENOSYS)),
            // The SIGSYS reporter cannot be replaced (a forced SIGSYS that is blocked kills anyway);
            // asking what SIGSYS does (no new action) is harmless, and runtimes do it for every
            // signal at start: Go's throws "sigaction failed" when the query is refused.
            Rule(syscall: "rt_sigaction", action: .allow, conditions: [when(0, .notEqual, SIGSYS)]),
            Rule(syscall: "rt_sigaction", action: .allow, conditions: [when(0, .equal, SIGSYS), when(1, .equal, 0)]),
            // Signals to itself only.
            Rule(syscall: "kill", action: .allow, conditions: [when(0, .equal, me)]),
            Rule(syscall: "kill", action: .allow, conditions: [when(0, .equal, 0)]),
            Rule(syscall: "tgkill", action: .allow, conditions: [when(0, .equal, me)]),
            // Limits can be read, never raised. Its own RLIMIT_NOFILE (7) may be set: the worker sets
            // it itself once its filter's listener has gone to the supervisor (Sandbox, step 8), its
            // hard limit with it, which no call can raise again; a plugin can only lower it.
            Rule(syscall: "prlimit64", action: .allow, conditions: [when(2, .equal, 0)]),
            Rule(syscall: "prlimit64", action: .allow, conditions: [when(0, .equal, 0), when(1, .equal, 7)]),
            Rule(syscall: "setrlimit", action: .allow, conditions: [when(0, .equal, 7)]),
            // The default personality, or the query, only.
            Rule(syscall: "personality", action: .allow, conditions: [when(0, .equal, 0)]),
            Rule(syscall: "personality", action: .allow, conditions: [when(0, .equal, 0xFFFF_FFFF)]),
            // Any other value traps (libseccomp gives the exact matches above precedence).
            Rule(syscall: "personality", action: .trap, conditions: [when(0, .greater, 0)]),
            // A pair of connected sockets within the worker is harmless; a new socket that could
            // connect to a local service (a session bus, an agent, another daemon's socket file:
            // Landlock does not cover connect) needs the `network` permission, as TCP does.
            // Stream and seqpacket only: a datagram socket could be re-`connect`ed to a socket file.
            Rule(syscall: "socketpair", action: .allow, conditions: [when(0, .equal, AF_UNIX), when(1, .maskedEqual(mask: 0xF), 1)]),
            Rule(syscall: "socketpair", action: .allow, conditions: [when(0, .equal, AF_UNIX), when(1, .maskedEqual(mask: 0xF), 5)]),
        ]
        rules += [
            // Lowering its own priority (background work in Go, Python, databases): `who` 0 is the
            // calling process only; raising it needs CAP_SYS_NICE, which the worker does not have,
            // so the kernel refuses that. Another pid (another plugin of the same uid) stays denied.
            Rule(syscall: "setpriority", action: .allow, conditions: [when(0, .equal, 0), when(1, .equal, 0)]),
            // SCHED_BATCH (3) and SCHED_IDLE (5) for itself, with or without SCHED_RESET_ON_FORK: only
            // ever less CPU; real-time policies need CAP_SYS_NICE and stay denied here too.
            Rule(syscall: "sched_setscheduler", action: .allow, conditions: [when(0, .equal, 0), when(1, .maskedEqual(mask: 0xFFFF_FFFF & ~resetOnFork), 3)]),
            Rule(syscall: "sched_setscheduler", action: .allow, conditions: [when(0, .equal, 0), when(1, .maskedEqual(mask: 0xFFFF_FFFF & ~resetOnFork), 5)]),
        ]
        if let owner {
            // `fchown` to the owner it has (or -1, unchanged): a no-op the kernel allows any owner,
            // which SQLite makes for its journal whenever it runs as root. Any other owner stays
            // denied (the worker has no CAP_CHOWN anyway).
            let word: Condition.Op = .maskedEqual(mask: 0xFFFF_FFFF)
            for uid in [UInt64(owner.uid), 0xFFFF_FFFF] {
                for gid in [UInt64(owner.gid), 0xFFFF_FFFF] {
                    rules.append(Rule(syscall: "fchown", action: .allow, conditions: [when(1, word, uid), when(2, word, gid)]))
                }
            }
        }
        rules += prctlOptions.map { Rule(syscall: "prctl", action: .allow, conditions: [when(0, .equal, $0)]) }
        rules += ioctlRequests.map { Rule(syscall: "ioctl", action: .allow, conditions: [when(1, .equal, $0)]) }
        if network {
            rules += [AF_UNIX, AF_INET, AF_INET6].map { Rule(syscall: "socket", action: .allow, conditions: [when(0, .equal, $0)]) }
        }
        return rules
    }

    /// The fatal rules by syscall name (they depend on neither `network` nor the pid).
    private static let fatalRules: [String: [Rule]] = Dictionary(
        grouping: rules(network: false, pid: 0).filter { $0.action == .trap }, by: \.syscall)

    /// For a call the filter did not allow: true when it ends the worker (a fatal rule matches it),
    /// false when it is refused with EPERM and counted.
    public static func isFatal(_ syscall: String, args: [UInt64]) -> Bool {
        guard let candidates = fatalRules[syscall] else { return false }
        return candidates.contains { rule in rule.conditions.allSatisfy { $0.holds(args) } }
    }
}
