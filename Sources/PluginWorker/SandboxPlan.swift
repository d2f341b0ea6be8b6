import Confinement
import CSandboxSupport
import LinuxSupport
import PluginProtocol
#if canImport(Glibc)
import Glibc
#endif

/// Everything the worker will do to confine itself, worked out from its spec before any of it is
/// applied (docs/sandbox.md): limits, namespaces, Landlock's rules, the seccomp policy. `Sandbox`
/// then applies it in order; nothing here has any effect yet.
struct SandboxPlan {
    struct Limit {
        var resource: Int32
        var value: UInt64
        var name: String
    }

    var enabled: Bool
    var supervisorPID: Int32
    var socketFD: Int32
    /// The descriptor channel (`WorkerSpec.descriptorChannelFD`): where the seccomp listener goes
    /// to the supervisor (nil: the SIGSYS reporter names violations).
    var descriptorChannelFD: Int32?
    /// The descriptor channel stays open afterwards: the supervisor hands peer links over it (PeerLinks/).
    var keepsDescriptorChannel: Bool
    /// The payload channel (`WorkerSpec.payloadChannelFD`), kept open: the memfds of bytes attached
    /// to messages travel on it.
    var payloadChannelFD: Int32?
    /// The taken page's descriptor, once mapped (`TakenPage.descriptor`), kept open: sent to a
    /// supervisor that took this worker over in an upgrade in place.
    var takenPageFD: Int32?
    /// The supervisor's (and so its own) uid and gid, for its id maps.
    var uid: uid_t?
    var gid: gid_t?
    /// Why the supervisor could not start it in namespaces of its own (from its environment).
    var isolationRefused: String?
    /// Its control group's `cgroup.procs` files, or why it has none.
    var cgroupProcs: [String]?
    /// v1: the same group's `tasks` files, to join by moving its one thread (`WorkerSpec.cgroupTasks`).
    var cgroupTasks: [String]?
    var cgroupMissing: String?
    /// The supervisor moves it into its group and says so on the descriptor channel.
    var cgroupBySupervisor: Bool
    /// Layers the operator demands: a missing one is an error instead of a note.
    var required: Set<SandboxLayer>
    var limits: [Limit]
    /// `network` permission: AF_INET/AF_INET6 sockets, the resolver's files, no network namespace.
    var network: Bool
    /// The supervisor's network namespace: a worker in another was given an empty one.
    var hostNetworkNamespace: UInt64?
    /// Debug mode: it stays dumpable (a debugger may attach).
    var debuggable: Bool
    /// The supervisor's compiled filter for pid 1 of a namespace, with a listener.
    var seccompProgram: [UInt8]?
    var namespaces: Int32
    var landlockRules: [Landlock.PathRule]
    /// The seccomp policy, with the supervisor answering for the filter or without.
    func seccompRules(notify: Bool) -> [SeccompPolicy.Rule] {
        SeccompPolicy.rules(network: network, pid: getpid(), notify: notify, owner: (uid ?? getuid(), gid ?? getgid()))
    }

    init(_ spec: WorkerSpec) {
        let sandbox = spec.sandbox
        enabled = sandbox.enabled
        supervisorPID = spec.supervisorPID
        socketFD = spec.socketFD
        descriptorChannelFD = spec.descriptorChannelFD
        // Kept for peer links.
        keepsDescriptorChannel = spec.descriptorChannelFD != nil && spec.peerLinks == true
        payloadChannelFD = spec.payloadChannelFD
        hostNetworkNamespace = spec.hostNetworkNamespace
        uid = spec.uid
        gid = spec.gid
        if let why = getenv(Spawner.isolationRefusedVariable) {
            isolationRefused = String(cString: why)
            unsetenv(Spawner.isolationRefusedVariable)
        }
        cgroupProcs = spec.cgroupProcs
        cgroupTasks = spec.cgroupTasks
        cgroupMissing = spec.cgroupMissing
        cgroupBySupervisor = spec.cgroupBySupervisor == true && spec.descriptorChannelFD != nil
        debuggable = sandbox.debuggable == true
        seccompProgram = sandbox.seccompProgram.map { Array($0) }
        required = Set(sandbox.required)
        network = sandbox.permissions.contains(.network)
        // Equal soft and hard limits cannot be raised without capabilities.
        limits = [
            Limit(resource: CWS_RLIMIT_DATA, value: UInt64(sandbox.memoryMB ?? 1024) << 20, name: "RLIMIT_DATA"),
            Limit(resource: CWS_RLIMIT_NOFILE, value: UInt64(sandbox.openFiles ?? 256), name: "RLIMIT_NOFILE"),
            Limit(resource: CWS_RLIMIT_CORE, value: 0, name: "RLIMIT_CORE"),
            Limit(resource: CWS_RLIMIT_NPROC, value: min(4096, cws_get_rlimit_max(CWS_RLIMIT_NPROC)), name: "RLIMIT_NPROC"),
        ]
        // A user namespace (no capabilities over the host); without `network` a fresh network
        // namespace (no interfaces but a down loopback).
        namespaces = CWS_CLONE_NEWUSER | CWS_CLONE_NEWIPC | CWS_CLONE_NEWUTS | (network ? 0 : CWS_CLONE_NEWNET)
        // Read-only the bundle and system libraries, read-write the data folder only.
        var rules = [
            Landlock.PathRule(path: spec.bundle, writable: false, required: true),
            Landlock.PathRule(path: spec.dataDirectory, writable: true, required: true),
            Landlock.PathRule(path: "/dev/null", writable: true, required: false),
        ]
        if let live = spec.liveDirectory { rules.append(.init(path: live, writable: false, required: false)) }
        // Its private temporary folder (TMPDIR, SQLITE_TMPDIR): SQLite's and Python's temporary files.
        if let temp = spec.tempDirectory { rules.append(.init(path: temp, writable: true, required: true)) }
        // Its own threads' files (/proc/self/task/<tid>/comm, written by pthread_setname_np for
        // another thread): what is there concerns this process alone (its threads' names, its own
        // OOM score, which it can only raise, its memory); the id maps are written once already.
        rules.append(.init(path: "/proc/\(getpid())/task", writable: true, required: false))
        // The worker's own executable (/proc/self/exe: runtimes open it to find their own symbols).
        if let exe = FileSystem.realPath("/proc/self/exe") { rules.append(.init(path: exe, writable: false, required: false)) }
        // Its own group's (the one it joins at step 3a; this process is still in its parent's now).
        for folder in spec.cgroupFolders ?? SandboxPaths.ownCgroupFolders() {
            for file in SandboxPaths.cgroupFiles { rules.append(.init(path: folder + "/" + file, writable: false, required: false)) }
        }
        for p in SandboxPaths.systemReadOnly + sandbox.runtimePaths + (network ? SandboxPaths.networkReadOnly : []) {
            rules.append(.init(path: p, writable: false, required: false))
        }
        for permission in sandbox.permissions {
            switch permission {
            case .read(let path): rules.append(.init(path: path, writable: false, required: false))
            case .write(let path): rules.append(.init(path: path, writable: true, required: false))
            case .network, .hostCall: break
            }
        }
        landlockRules = rules
    }
}
