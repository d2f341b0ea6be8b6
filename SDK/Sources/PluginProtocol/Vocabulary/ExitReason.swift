/// Why a worker ended (`lastExit.reason` in `status`, SPEC §6 and §8). The worker's own reasons
/// (sent in an `exit` notice) each have a fixed exit code; the supervisor believes a notice only when
/// the process really ended with that code, since a plugin can write anything to its socket but
/// cannot fake how its process ended.
public enum ExitReason: String, Sendable, Codable, CaseIterable {
    // How the process ended, when nothing more is known.
    case exited, signaled
    // The worker ended itself, and said why.
    case badSpec, orphaned, sandboxError, loadError, missingSymbol, abiMismatch, createFailed
    /// A layer the operator requires (`requireSandboxLayers`) is not there on this host.
    case sandboxUnavailable
    case sandboxViolation
    /// It was signalled to its own pid (SIGTERM/SIGINT) and ended cleanly.
    case terminated
    // The supervisor ended it.
    case protocolViolation, watchdog, memoryLimit, startupTimeout, startupFailed, disconnected
    case dependencyRestarted, spawnError
    /// `startup` refused because the library and its manifest disagree: the library implements
    /// another identifier, or needs dependencies the manifest does not declare.
    case identifierMismatch, dependencyMismatch
    /// It crashed (SIGSEGV, SIGBUS) after its library file was changed in place under it.
    case libraryReplaced
    /// Stopped on purpose (shutdown, restart, uninstall, update).
    case stopped

    /// The exit code a worker uses when it ends itself for this reason (sysexits-style, apart from
    /// plugin exits), or nil for reasons the worker never gives.
    public var workerExitCode: Int32? {
        switch self {
        case .badSpec: return 64
        case .orphaned: return 65
        case .sandboxError: return 71
        case .sandboxUnavailable: return 72
        case .loadError, .missingSymbol, .abiMismatch, .createFailed: return 78
        case .sandboxViolation: return 159
        // Its protocol socket failed, or ended before `willTerminate` (no notice can follow).
        case .disconnected: return 74
        case .terminated: return 0
        default: return nil
        }
    }

    /// A cause a restart cannot cure (SPEC §6): the plugin goes to `failed` at once.
    public var isPermanent: Bool {
        switch self {
        case .badSpec, .loadError, .missingSymbol, .abiMismatch, .identifierMismatch, .dependencyMismatch, .sandboxUnavailable: return true
        default: return false
        }
    }
}

/// How a worker ended: `{"code": n}` or `{"signal": "SIGSEGV"}`, plus `reason` and, for sandbox
/// violations, `syscall`.
public struct ExitStatus: Codable, Sendable, Equatable {
    public var code: Int32?
    public var signal: String?
    public var reason: ExitReason
    public var syscall: String?
    public var message: String?

    public init(code: Int32? = nil, signal: String? = nil, reason: ExitReason, syscall: String? = nil, message: String? = nil) {
        self.code = code
        self.signal = signal
        self.reason = reason
        self.syscall = syscall
        self.message = message
    }
}
