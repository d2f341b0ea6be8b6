import CWorkerSupport
import LinuxSupport
import PluginProtocol
#if canImport(Glibc)
import Glibc
#endif

/// Puts the worker in its sandbox, in this order, before the plugin's first instruction (docs/sandbox.md):
/// die with the supervisor (and check it is still the parent), drop inherited descriptors, rlimits,
/// namespaces, no_new_privs, Landlock, capabilities, then the seccomp filter. A layer the host
/// lacks is skipped and reported as missing, unless the operator demands it.
enum Sandbox {
    struct Applied {
        var layers: [String] = []
        var missing: [String] = []
        /// Microseconds per step, for `status` (`timings.sandbox.*Us`).
        var timings: [String: Int] = [:]
    }

    /// What a plugin with the `network` permission also needs to read: name resolution and TLS roots.
    static let networkReadOnly = [
        "/etc/resolv.conf", "/etc/hosts", "/etc/nsswitch.conf", "/etc/gai.conf", "/etc/ssl", "/etc/ca-certificates",
        "/usr/share/ca-certificates",
    ]

    /// Folders every worker may read: the system's and the Swift runtime's libraries, and what the
    /// C library, Dispatch and Foundation read at run time. `/proc` is needed whole: Dispatch's
    /// thread-pool monitor reads `/proc/<tid>/stat` of its own threads and crashes when it cannot.
    /// Other processes' sensitive entries (`mem`, `environ`, `maps`, `fd/`) stay closed: they need
    /// ptrace access, which Landlock refuses outside the worker's own domain, and every process of
    /// ours is non-dumpable.
    static let systemReadOnly = [
        "/usr/lib", "/lib", "/lib64", "/usr/lib64", "/usr/local/lib", "/etc/ld.so.cache", "/etc/localtime",
        "/usr/share/zoneinfo", "/sys/devices/system/cpu", "/dev/urandom", "/proc",
    ]

    static func apply(_ spec: WorkerSpec, sendLock: SendLock) throws(WorkerError) -> Applied {
        let started = ProcessControl.monotonicMicroseconds()
        var applied = Applied()
        func layer(_ name: SandboxLayer) { applied.layers.append(name.rawValue) }
        func missing(_ name: SandboxLayer, _ why: String) throws(WorkerError) {
            if spec.sandbox.required.contains(name) {
                throw WorkerError(code: .sandboxError, message: "the operator requires the sandbox layer '\(name)', which this host cannot provide: \(why)")
            }
            applied.missing.append("\(name.rawValue): \(why)")
        }

        layer(.process)
        if getsid(0) == getpid() { layer(.session) } else { try missing(.session, "not a session leader") }

        // 1. Die with the supervisor, and make sure it did not already die before the prctl.
        do { try ProcessControl.dieWithParent() } catch { throw failure(error) }
        guard getppid() == spec.supervisorPID else {
            throw WorkerError(code: .orphaned, message: "the supervisor (pid \(spec.supervisorPID)) is gone; exiting")
        }
        layer(.pdeathsig)
        // Not dumpable: no core files, no ptrace or /proc/<pid>/mem access by same-uid processes.
        do { try ProcessControl.setNotDumpable() } catch { throw failure(error) }

        // 2. Nothing inherited but stdio and the protocol socket.
        do { try ProcessControl.closeDescriptors(from: 3, except: spec.socketFD) } catch { throw failure(error) }
        layer(.descriptors)

        guard spec.sandbox.enabled else {
            for name: SandboxLayer in [.rlimits, .userNamespace, .networkNamespace, .ipcNamespace, .utsNamespace, .noNewPrivs,
                                       .landlock, .capabilities, .seccomp] {
                try missing(name, "sandbox switched off (--no-sandbox)")
            }
            return applied
        }
        var mark = ProcessControl.monotonicMicroseconds()
        applied.timings["sandbox.baseUs"] = Int(mark - started)
        func lap(_ step: String) {
            let t = ProcessControl.monotonicMicroseconds()
            applied.timings["sandbox.\(step)Us"] = Int(t - mark)
            mark = t
        }

        // 3. Resource limits; equal soft and hard limits cannot be raised without capabilities.
        let memory = UInt64(spec.sandbox.memoryMB ?? 1024) << 20
        for (resource, value, what) in [
            (CWS_RLIMIT_DATA, memory, "RLIMIT_DATA"),
            (CWS_RLIMIT_NOFILE, UInt64(spec.sandbox.openFiles ?? 256), "RLIMIT_NOFILE"),
            (CWS_RLIMIT_CORE, 0, "RLIMIT_CORE"),
            (CWS_RLIMIT_NPROC, min(4096, cws_get_rlimit_max(CWS_RLIMIT_NPROC)), "RLIMIT_NPROC"),
        ] {
            let rc = cws_set_rlimit(resource, value)
            guard rc == 0 else { throw failure("setrlimit(\(what))", -rc) }
        }
        layer(.rlimits)
        lap("rlimits")

        // 4. Namespaces: a user namespace (no capabilities over the host), and without the
        //    `network` permission a fresh network namespace (no interfaces but a down loopback).
        let network = spec.sandbox.permissions.contains(.network)
        let uid = getuid(), gid = getgid()
        var flags = CWS_CLONE_NEWUSER | CWS_CLONE_NEWIPC | CWS_CLONE_NEWUTS
        if !network { flags |= CWS_CLONE_NEWNET }
        var rc = cws_unshare(flags)
        if rc == 0 {
            rc = cws_map_ids(uid, gid)
            guard rc == 0 else { throw failure("writing /proc/self/uid_map", -rc) }
            layer(.userNamespace)
            layer(.ipcNamespace)
            layer(.utsNamespace)
            if !network { layer(.networkNamespace) }
        } else {
            let why = "unshare(CLONE_NEWUSER) failed: \(String(cString: strerror(-rc)))"
            try missing(.userNamespace, why)
            // root without user namespaces can still take the network, IPC and host name away.
            var fallback = CWS_CLONE_NEWIPC | CWS_CLONE_NEWUTS
            if !network { fallback |= CWS_CLONE_NEWNET }
            if cws_unshare(fallback) == 0 {
                layer(.ipcNamespace)
                layer(.utsNamespace)
                if !network { layer(.networkNamespace) }
            } else {
                for name: SandboxLayer in [.ipcNamespace, .utsNamespace] + (network ? [] : [.networkNamespace]) {
                    try missing(name, "unshare not permitted without a user namespace")
                }
            }
        }
        lap("namespaces")

        // 5. No privilege gain through exec or setuid files, ever (also lets Landlock and seccomp load).
        do { try ProcessControl.setNoNewPrivileges() } catch { throw failure(error) }
        layer(.noNewPrivs)

        // 6. Landlock: read-only the bundle and system libraries, read-write the data folder only.
        if let abi = ProcessControl.landlockABI().map(Int32.init) {
            var rules = [
                Landlock.PathRule(path: spec.bundle, writable: false, required: true),
                Landlock.PathRule(path: spec.dataDirectory, writable: true, required: true),
                Landlock.PathRule(path: "/dev/null", writable: true, required: false),
            ]
            if let live = spec.liveDirectory { rules.append(.init(path: live, writable: false, required: false)) }
            for p in systemReadOnly + spec.sandbox.runtimePaths + (network ? networkReadOnly : []) {
                rules.append(.init(path: p, writable: false, required: false))
            }
            for permission in spec.sandbox.permissions {
                switch permission {
                case .read(let path): rules.append(.init(path: path, writable: false, required: false))
                case .write(let path): rules.append(.init(path: path, writable: true, required: false))
                case .network: break
                }
            }
            let ll = try Landlock.apply(rules, abi: abi, denyTCP: !network)
            layer(.landlock)
            if ll.scoped { layer(.landlockScopes) } else {
                try missing(.landlockScopes, "Landlock ABI \(abi) < 6: signals and abstract sockets are not scoped (seccomp still limits kill to the worker itself)")
            }
            if ll.network { layer(.landlockNetwork) } else if !network {
                try missing(.landlockNetwork, "Landlock ABI \(abi) < 4: no TCP rules (seccomp and the network namespace still deny the network)")
            }
        } else {
            try missing(.landlock, "the kernel offers no Landlock (landlock_create_ruleset failed: \(ProcessControl.landlockUnavailableReason()))")
        }
        lap("landlock")

        // 7. No capabilities left (root workers included).
        let dropped = cws_drop_capabilities()
        if dropped == 0 { layer(.capabilities) } else { try missing(.capabilities, "capset failed: \(String(cString: strerror(-dropped)))") }

        // 8. The syscall filter, last: from here on the plugin's code may run.
        let rules = SeccompPolicy.rules(network: network, pid: getpid())
        _ = try Seccomp.install(rules, reportFD: spec.socketFD, sendLock: sendLock)
        layer(.seccomp)
        lap("seccomp")
        return applied
    }

    static func failure(_ error: SystemError) -> WorkerError {
        WorkerError(code: .sandboxError, message: error.description)
    }

    static func failure(_ call: String, _ code: Int32) -> WorkerError {
        WorkerError(code: .sandboxError, message: "\(call) failed: \(String(cString: strerror(code)))")
    }
}
