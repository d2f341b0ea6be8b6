/// The sandbox layers a worker reports in `hello` and `status` shows (SPEC §5, docs/sandbox.md),
/// in the order the worker applies them.
public enum SandboxLayer: String, Sendable, Codable, CaseIterable {
    case process, session, pdeathsig, descriptors
    /// A control group of its own (memory.max, memory.high, pids.max, cpu.max), joined before
    /// the plugin loads.
    case cgroup
    case rlimits
    case userNamespace, networkNamespace, ipcNamespace, utsNamespace
    /// PID 1 of a PID namespace of its own, with a /proc of its own: it sees no other process.
    case pidNamespace
    /// A mount namespace whose root holds only what its Landlock rules name (bind mounts), a fresh
    /// /proc and a private /dev/shm: no other mount of the host's.
    case mountNamespace
    case noNewPrivs, landlock, landlockNetwork, landlockScopes, capabilities, seccomp
    /// The filter hands what it does not allow to the supervisor (seccomp user notification), which
    /// names a violation even when the plugin blocked every signal, and counts each denial.
    case seccompNotify

    /// The layers an operator may require (`requireSandboxLayers`): every one the host may lack.
    public static let requirable: [SandboxLayer] = [
        .session, .cgroup, .rlimits, .userNamespace, .networkNamespace, .ipcNamespace, .utsNamespace, .pidNamespace, .mountNamespace, .noNewPrivs,
        .landlock, .landlockNetwork, .landlockScopes, .capabilities, .seccomp, .seccompNotify,
    ]
}
