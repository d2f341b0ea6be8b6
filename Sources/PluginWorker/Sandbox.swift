import Confinement
import CSandboxSupport
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
        var report = SandboxReport()
        /// Microseconds per step, for `status` (`timings.sandbox.*Us`).
        var timings: [String: Int] = [:]
        /// The descriptor channel (descriptor 4) is still open for peer links: the plan keeps it and
        /// the listener went over it (without one, the supervisor's notifier still reads it, and a
        /// plugin could hand it a descriptor as if it were the listener).
        var keptDescriptorChannel = false
    }

    /// Applies `plan`, step by step. The seccomp filter is compiled first, so a policy libseccomp
    /// refuses fails before anything has changed, and loaded last.
    static func apply(_ plan: SandboxPlan, sendLock: SendLock) throws(WorkerError) -> Applied {
        let started = ProcessControl.monotonicMicroseconds()
        var applied = Applied()
        func layer(_ name: SandboxLayer) { applied.report.add(name) }
        func missing(_ name: SandboxLayer, _ why: String) throws(WorkerError) {
            if plan.required.contains(name) {
                throw WorkerError(code: .sandboxUnavailable, message: "the operator requires the sandbox layer '\(name)', which this host cannot provide: \(why)")
            }
            applied.report.lack(name, why)
        }

        layer(.process)
        if getsid(0) == getpid() { layer(.session) } else { try missing(.session, "not a session leader") }

        // 1. Die with the supervisor, and make sure it did not already die before the prctl. PID 1
        // of its own namespace (spawned isolated) has the death signal from before its exec and
        // cannot see its parent: the protocol socket tells whether the supervisor is still there.
        let isolated = getpid() == 1
        if isolated {
            guard cws_peer_hung_up(plan.socketFD) == 0 else {
                throw WorkerError(code: .orphaned, message: "the supervisor (pid \(plan.supervisorPID)) is gone; exiting")
            }
        } else {
            do { try ProcessControl.dieWithParent() } catch { throw failure(error) }
            guard getppid() == plan.supervisorPID else {
                throw WorkerError(code: .orphaned, message: "the supervisor (pid \(plan.supervisorPID)) is gone; exiting")
            }
        }
        layer(.pdeathsig)

        // 2. Nothing inherited but stdio, the protocol socket, the two channels and the taken page.
        let channels = [plan.descriptorChannelFD, plan.payloadChannelFD, plan.takenPageFD].compactMap { $0 }
        do { try ProcessControl.closeDescriptors(from: 3, except: [plan.socketFD] + channels) } catch {
            throw failure(error)
        }
        layer(.descriptors)

        guard plan.enabled else {
            if !plan.debuggable { try notDumpable() }
            if let fd = plan.descriptorChannelFD { _ = close(fd) }
            for name: SandboxLayer in [.cgroup, .rlimits, .userNamespace, .networkNamespace, .ipcNamespace, .utsNamespace,
                                       .pidNamespace, .mountNamespace, .noNewPrivs,
                                       .landlock, .capabilities, .seccomp, .seccompNotify] {
                try missing(name, "sandbox switched off (--no-sandbox, or \"sandbox\": false in the configuration)")
            }
            return applied
        }
        // The supervisor's program when it fits (a listener, and pid 1 of a namespace: the rules name
        // the worker's own pid), else compiled here (about a millisecond of libseccomp).
        let filterStarted = ProcessControl.monotonicMicroseconds()
        let precompiled = plan.seccompProgram != nil && plan.descriptorChannelFD != nil && getpid() == 1
        var filter = try confined { () throws(ConfinementError) in
            if precompiled, let program = plan.seccompProgram { return try Seccomp.Filter(program: program) }
            return try Seccomp.Filter(plan.seccompRules(notify: plan.descriptorChannelFD != nil), notify: plan.descriptorChannelFD != nil)
        }
        // How long the filter took to make: `sandbox.filterUs` when compiled here, `sandbox.filterGivenUs`
        // when the supervisor's program was taken.
        applied.timings[precompiled ? "sandbox.filterGivenUs" : "sandbox.filterUs"] = Int(ProcessControl.monotonicMicroseconds() - filterStarted)
        var mark = ProcessControl.monotonicMicroseconds()
        applied.timings["sandbox.baseUs"] = Int(mark - started)
        func lap(_ step: String) {
            let t = ProcessControl.monotonicMicroseconds()
            applied.timings["sandbox.\(step)Us"] = Int(t - mark)
            mark = t
        }

        // 3. Its own control group, joined before anything is allocated for the plugin (memory is
        // charged to the group that allocates it; pids.max and cpu.max hold from then on). When
        // the supervisor moves it, the move overlaps the steps below (it waits for a grace period
        // of the kernel's), and the worker waits for its word after the filter, before the plugin.
        if plan.cgroupBySupervisor {
            // Below, after step 8.
        } else if let procs = plan.cgroupProcs {
            // One thread (always so when forked by the fork server; an exec'd worker whose runtime
            // started none): move it alone, without the kernel's global lock (WorkerSpec.cgroupTasks).
            var files = procs
            if let tasks = plan.cgroupTasks, (try? ProcessControl.threadCount()) == 1 { files = tasks }
            var failed: String?
            for file in files where failed == nil {
                let fd = open(file, O_WRONLY | O_CLOEXEC)
                if fd < 0 || write(fd, "0", 1) != 1 { failed = "joining \(file) failed: \(String(cString: strerror(errno)))" }
                if fd >= 0 { close(fd) }
            }
            if let failed { try missing(.cgroup, failed) } else { layer(.cgroup) }
        } else {
            try missing(.cgroup, plan.cgroupMissing ?? "the supervisor gave it no group")
        }
        lap("cgroup")

        // 3b. Resource limits; RLIMIT_NOFILE last of all (step 8).
        for limit in plan.limits where limit.resource != CWS_RLIMIT_NOFILE {
            let rc = cws_set_rlimit(limit.resource, limit.value)
            guard rc == 0 else { throw failure("setrlimit(\(limit.name))", -rc) }
        }
        layer(.rlimits)
        lap("rlimits")

        // 4. Namespaces.
        if isolated {
            let (givenNetwork, unshareUs) = try isolatedNamespaces(plan, layer: layer, missing: missing)
            applied.timings[givenNetwork ? "sandbox.networkGivenUs" : "sandbox.networkUs"] = unshareUs
        } else {
            try unsharedNamespaces(plan, layer: layer, missing: missing)
        }
        // Not dumpable from here on (no core files, no ptrace or /proc/<pid>/mem access by same-uid
        // processes). Not before: a non-dumpable process's /proc/self files belong to root, and a
        // worker that is not root could not write its uid_map. In debug mode (`start --debug`) it
        // stays dumpable, so its user's debugger can attach; nothing else is loosened.
        if !plan.debuggable { try notDumpable() }
        lap("namespaces")

        // 5. No privilege gain through exec or setuid files, ever (also lets Landlock and seccomp load).
        do { try ProcessControl.setNoNewPrivileges() } catch { throw failure(error) }
        layer(.noNewPrivs)

        // 6. Landlock.
        let network = plan.network
        if let abi = ProcessControl.landlockABI().map(Int32.init) {
            // In its own root (minimal_root.c): the devices there, and its private /dev/shm (`shm_open`,
            // POSIX semaphores). /dev/zero is writable as /dev/null is (a write is discarded; a shared
            // mapping of it opens it read-write). Without that root, /dev/shm is the host's, shared with
            // every process: not granted.
            var rules = plan.landlockRules
            if applied.report.layers.contains(SandboxLayer.mountNamespace.rawValue) {
                rules += [.init(path: "/dev/zero", writable: true, required: false), .init(path: "/dev/random", writable: false, required: false),
                          .init(path: "/dev/shm", writable: true, required: false)]
            }
            let ll = try confined { () throws(ConfinementError) in try Landlock.apply(rules, abi: abi, denyTCP: !network) }
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

        // 8. The syscall filter, last: from here on the plugin's code may run. What it does not allow
        // goes to the supervisor, which answers (EPERM, counted) or ends the worker (a violation,
        // named even when every signal is blocked): the listener must reach it before the plugin
        // loads, and no copy may stay here.
        var notifyMissing: String? = plan.descriptorChannelFD == nil ? "the supervisor offered no channel for the filter's listener" : nil
        var listener: OwnedDescriptor?
        do throws(ConfinementError) {
            listener = try filter.load(reportFD: plan.socketFD, sendLock: sendLock)
        } catch {
            guard filter.notify else { throw failure(error) }
            // A kernel without user notification (before 5.0, or TSYNC_ESRCH before 5.7): the
            // SIGSYS reporter names violations, and denials are not counted.
            notifyMissing = "the kernel refused a filter with a listener (\(error.message)); violations are named by the worker's SIGSYS handler"
            filter = try confined { () throws(ConfinementError) in try Seccomp.Filter(plan.seccompRules(notify: false), notify: false) }
            listener = try confined { () throws(ConfinementError) in try filter.load(reportFD: plan.socketFD, sendLock: sendLock) }
        }
        layer(.seccomp)
        if isolated {
            // PID 1 of its namespace: its own fatal signals must still end it, and say which.
            let rc = Self.fatalSignals.withUnsafeBufferPointer { cws_install_fatal_signal_reporter($0.baseAddress, Int32($0.count)) }
            guard rc == 0 else { throw failure("sigaction(fatal signals)", -rc) }
        }
        if let channel = plan.descriptorChannelFD {
            var sentListener = false
            if let listener {
                let sent = cls_send_fd(channel, listener.raw)
                guard sent == 0 else {
                    guard -sent == ETOOMANYREFS else { throw failure("sending the seccomp listener", -sent) }
                    // Linux counts descriptors in flight per user, against the sender's RLIMIT_NOFILE:
                    // still the one it inherited here (it is lowered below), so this takes far more
                    // than a plugin can hold (docs/sandbox.md, "Known gaps").
                    throw WorkerError(code: .sandboxError, message: "sending the seccomp listener failed: the supervisor's user has more "
                                      + "descriptors in flight in Unix sockets (sent, not yet received) than this worker's open-files limit; "
                                      + "a process of that user holds them unread")
                }
                sentListener = true
            }
            // The supervisor's word on its cgroup (J joined, F failed) comes before it watches the
            // filter: nothing here needs an answer meanwhile.
            if plan.cgroupBySupervisor {
                switch cws_wait_byte(channel, 10_000) {
                case Int32(UInt8(ascii: "J")): layer(.cgroup)
                case Int32(UInt8(ascii: "F")): try missing(.cgroup, "the supervisor could not move it into its group (its log says why)")
                default: try missing(.cgroup, "the supervisor did not move it into its group within 10 s")
                }
            }
            if plan.keepsDescriptorChannel && sentListener {
                applied.keptDescriptorChannel = true
            } else {
                _ = close(channel)
            }
        }
        listener = nil
        if let why = notifyMissing { try missing(.seccompNotify, why) } else { layer(.seccompNotify) }
        // RLIMIT_NOFILE, once the listener has gone: Linux lets a process send descriptors only while
        // its user has no more in flight than its own RLIMIT_NOFILE, and every worker is the
        // supervisor's user: a plugin holding descriptors unread in a socket pair of its own would
        // otherwise stop other workers from handing over their listener. Its hard limit goes
        // down too, and nothing raises it again (the filter allows only this one resource).
        for limit in plan.limits where limit.resource == CWS_RLIMIT_NOFILE {
            let rc = cws_set_rlimit(limit.resource, limit.value)
            guard rc == 0 else { throw failure("setrlimit(\(limit.name))", -rc) }
        }
        lap("seccomp")
        return applied
    }

    /// The signals whose default action ends a process, but those the worker handles itself (the
    /// lifecycle signals, SIGSYS, SIGPIPE), SIGKILL/SIGSTOP, and SIGPROF, which the worker ignores
    /// (`ignoreProfilingSignal`).
    static let fatalSignals: [Int32] = [SIGQUIT, SIGILL, SIGTRAP, SIGABRT, SIGBUS, SIGFPE, SIGUSR2, SIGSEGV, SIGALRM,
                                        SIGSTKFLT, SIGXCPU, SIGXFSZ, SIGVTALRM, SIGIO, SIGPWR]

    /// SIGPROF is the CPU profiler's timer (`setitimer(ITIMER_PROF)`): a profiler installs its own
    /// handler, and one still in flight when profiling stops must not end the worker. Go's runtime
    /// in a c-shared plugin puts back, when its profile stops, the handler it found when it
    /// started (SIG_IGN for SIG_DFL, golang/go#19320); with the fatal-signal reporter there, a late
    /// tick ended the worker as a crash by SIGPROF (exit 155, RealLibraryTests' Go `profile`, now
    /// and then). Ignored, as Go itself would have it.
    static func ignoreProfilingSignal() {
        signal(SIGPROF, SIG_IGN)
    }

    /// Spawned in new user, PID and mount namespaces: maps its ids, builds its minimal root, then
    /// takes the network, IPC and host name away too (it holds the capabilities for that in its
    /// own user namespace, until step 7 drops them). Returns whether it was started in an empty
    /// network namespace made ahead (the fork server's, FS_EMPTY_NETWORK), and how long the
    /// IPC/UTS(/network) unshare took.
    static func isolatedNamespaces(_ plan: SandboxPlan, layer: (SandboxLayer) -> Void,
                                   missing: (SandboxLayer, String) throws(WorkerError) -> Void) throws(WorkerError) -> (Bool, Int) {
        // Not the supervisor's network namespace: one made for it alone, empty (the fork server's,
        // docs/sandbox.md "The fork server"); it need not make one. Asked of the host's /proc,
        // before the minimal root replaces it.
        let givenNetwork = !plan.network && plan.hostNetworkNamespace != nil
            && ProcessControl.networkNamespace().map { $0 != plan.hostNetworkNamespace } == true
        // Its ids map to themselves (the supervisor's, from the spec: until they are mapped, getuid()
        // says 65534). It holds CAP_SETUID/SETGID of its user namespace for this (ambient, from
        // cls_spawn_isolated), and is still dumpable, so /proc/self/uid_map is its own.
        let rc = cws_map_ids(plan.uid ?? getuid(), plan.gid ?? getgid())
        guard rc == 0 else { throw failure("writing /proc/self/uid_map", -rc) }
        layer(.userNamespace)
        let view = plan.landlockRules
        // A listed folder that is a symbolic link to another listed one (merged /usr's /lib ->
        // usr/lib) becomes that link in the new root rather than a second mount.
        let listed = Set(view.map(\.path))
        let links: [String?] = view.map { rule in
            // One readlink first: most paths are no link, and a realpath walks every component.
            guard let text = FileSystem.linkText(rule.path), let real = FileSystem.realPath(rule.path), real != rule.path,
                  listed.contains(real) else { return nil }
            return text
        }
        var what = [CChar](repeating: 0, count: 512)
        let newNS = cws_unshare(CWS_CLONE_NEWNS)
        let entered = newNS != 0 ? newNS : withOptionalCStrings(view.map(\.path)) { paths in
            withOptionalCStrings(links) { linkTexts in
                view.map { Int32($0.writable ? 1 : 0) }.withUnsafeBufferPointer { writable in
                    cws_enter_minimal_root(paths, writable.baseAddress, linkTexts, Int32(view.count), "/tmp", &what, what.count)
                }
            }
        }
        if entered == 0 {
            layer(.pidNamespace)
            layer(.mountNamespace)
        } else {
            // Without its own /proc the PID namespace hides nothing: both are reported missing.
            let step = newNS != 0 ? "unshare(CLONE_NEWNS)" : what.withUnsafeBufferPointer { String(cString: $0.baseAddress!) }
            let why = "\(step) failed: \(String(cString: strerror(-entered)))"
            try missing(.pidNamespace, "its own /proc could not be set up: " + why)
            try missing(.mountNamespace, why)
        }
        let others = CWS_CLONE_NEWIPC | CWS_CLONE_NEWUTS | (plan.network || givenNetwork ? 0 : CWS_CLONE_NEWNET)
        let unshareStarted = ProcessControl.monotonicMicroseconds()
        let unshared = cws_unshare(others)
        guard unshared == 0 else { throw failure("unshare(IPC, UTS, network) in its own user namespace", -unshared) }
        layer(.ipcNamespace)
        layer(.utsNamespace)
        if !plan.network { layer(.networkNamespace) }
        return (givenNetwork, Int(ProcessControl.monotonicMicroseconds() - unshareStarted))
    }

    /// Spawned without namespaces (the host refused them at spawn, or a preflight): a user, IPC,
    /// UTS and network namespace by unshare, where allowed; no PID or mount namespace.
    static func unsharedNamespaces(_ plan: SandboxPlan, layer: (SandboxLayer) -> Void,
                                   missing: (SandboxLayer, String) throws(WorkerError) -> Void) throws(WorkerError) {
        let network = plan.network
        let uid = getuid(), gid = getgid()
        var rc = cws_unshare(plan.namespaces)
        if rc == 0 {
            rc = cws_map_ids(uid, gid)
            guard rc == 0 else { throw failure("writing /proc/self/uid_map", -rc) }
            layer(.userNamespace)
            layer(.ipcNamespace)
            layer(.utsNamespace)
            if !network { layer(.networkNamespace) }
        } else {
            let why = "unshare(CLONE_NEWUSER) failed: \(String(cString: strerror(-rc)))" + userNamespaceRestriction()
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
        let why = plan.isolationRefused.map { $0 + userNamespaceRestriction() }
            ?? "the supervisor did not start it in namespaces of its own (a preflight, or --no-sandbox)"
        try missing(.pidNamespace, why)
        try missing(.mountNamespace, why)
    }

    static func withOptionalCStrings<R>(_ strings: [String?], _ body: (UnsafePointer<UnsafePointer<CChar>?>) -> R) -> R {
        let pointers = strings.map { $0.map { UnsafePointer(strdup($0)) } ?? nil } + [nil]
        defer { for p in pointers { free(UnsafeMutablePointer(mutating: p)) } }
        return pointers.withUnsafeBufferPointer { body($0.baseAddress!) }
    }

    /// The host setting that refuses unprivileged user namespaces, when one does: Ubuntu's AppArmor
    /// switch, Debian's older sysctl, or a zero namespace limit. Read before Landlock is on.
    static func userNamespaceRestriction() -> String {
        func value(_ path: String) -> String? {
            (try? FileSystem.readFile(path, limit: 64)).map { String(decoding: $0.filter { $0 > 0x20 }, as: UTF8.self) }
        }
        if value("/proc/sys/kernel/apparmor_restrict_unprivileged_userns") == "1" {
            return "; this host restricts unprivileged user namespaces (kernel.apparmor_restrict_unprivileged_userns=1)"
        }
        if value("/proc/sys/kernel/unprivileged_userns_clone") == "0" {
            return "; this host disables unprivileged user namespaces (kernel.unprivileged_userns_clone=0)"
        }
        if value("/proc/sys/user/max_user_namespaces") == "0" {
            return "; this host allows no user namespaces (user.max_user_namespaces=0)"
        }
        return ""
    }

    static func notDumpable() throws(WorkerError) {
        do { try ProcessControl.setNotDumpable() } catch { throw failure(error) }
    }

    /// A confinement step, its failure a `sandboxError`.
    static func confined<T: ~Copyable>(_ body: () throws(ConfinementError) -> T) throws(WorkerError) -> T {
        do { return try body() } catch { throw failure(error) }
    }

    static func failure(_ error: ConfinementError) -> WorkerError {
        WorkerError(code: .sandboxError, message: error.message)
    }

    static func failure(_ error: SystemError) -> WorkerError {
        WorkerError(code: .sandboxError, message: error.description)
    }

    static func failure(_ call: String, _ code: Int32) -> WorkerError {
        WorkerError(code: .sandboxError, message: "\(call) failed: \(String(cString: strerror(code)))")
    }
}
