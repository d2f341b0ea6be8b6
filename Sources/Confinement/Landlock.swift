import CSandboxSupport
#if canImport(Glibc)
import Glibc
#endif

/// File-system (and, from ABI 4, TCP; from ABI 6, signal and abstract-socket) confinement with
/// Landlock. The ABI is queried at run time; rights the kernel does not know are left out.
public enum Landlock {
    public static let readOnly: UInt64 = CWS_LL_FS_EXECUTE | CWS_LL_FS_READ_FILE | CWS_LL_FS_READ_DIR
    /// Rights that apply to a file (not a folder); a rule on a file may hold only these.
    public static let fileRights: UInt64 = CWS_LL_FS_EXECUTE | CWS_LL_FS_WRITE_FILE | CWS_LL_FS_READ_FILE
        | CWS_LL_FS_TRUNCATE | CWS_LL_FS_IOCTL_DEV

    /// Every file-system right the kernel's ABI handles.
    public static func handledFS(abi: Int32) -> UInt64 {
        var rights: UInt64 = (1 << 13) - 1  // ABI 1: EXECUTE ... MAKE_SYM
        if abi >= 2 { rights |= CWS_LL_FS_REFER }
        if abi >= 3 { rights |= CWS_LL_FS_TRUNCATE }
        if abi >= 5 { rights |= CWS_LL_FS_IOCTL_DEV }
        return rights
    }

    public struct PathRule: Sendable {
        public var path: String
        public var writable: Bool
        /// A missing optional path is skipped; a missing required one is an error.
        public var required: Bool
        /// Whether files beneath it may be executed (read-only rules); nil: the default of the
        /// caller's `apply` (`executable`).
        public var executable: Bool?

        public init(path: String, writable: Bool, required: Bool, executable: Bool? = nil) {
            self.path = path
            self.writable = writable
            self.required = required
            self.executable = executable
        }
    }

    /// What was put in force, for `status`.
    public struct Applied: Sendable {
        public var abi: Int32
        public var network: Bool
        public var scoped: Bool
    }

    /// Creates the ruleset, adds `rules`, restricts the calling thread (before any other exists).
    /// `denyTCP`: also handle TCP bind/connect (denied: no rule grants them). `executable`: whether
    /// read-only rules allow executing what they cover, unless a rule says otherwise.
    public static func apply(_ rules: [PathRule], abi: Int32, denyTCP: Bool, executable: Bool = true) throws(ConfinementError) -> Applied {
        let fs = handledFS(abi: abi)
        let net: UInt64 = (abi >= 4 && denyTCP) ? (CWS_LL_NET_BIND_TCP | CWS_LL_NET_CONNECT_TCP) : 0
        let scoped: UInt64 = abi >= 6 ? (CWS_LL_SCOPE_SIGNAL | CWS_LL_SCOPE_ABSTRACT_UNIX_SOCKET) : 0
        let ruleset = cws_landlock_create(fs, net, scoped)
        guard ruleset >= 0 else { throw failure("landlock_create_ruleset", -ruleset) }
        for rule in rules {
            let execute = rule.executable ?? executable
            var access = rule.writable ? fs : (readOnly & fs)
            if !execute { access &= ~CWS_LL_FS_EXECUTE }
            // A file gets only the rights a file can have (the rest are refused for one).
            var opened: Int32 = 0
            let rc = cws_landlock_allow_path(ruleset, rule.path, access, fileRights, &opened)
            if rc != 0 {
                // A path that is not there is left out, unless the rule requires it.
                if opened == 0 && !rule.required { continue }
                close(ruleset)
                throw failure(opened == 0 ? "open" : "landlock_add_rule", -rc, rule.path)
            }
        }
        let rc = cws_landlock_restrict(ruleset)
        guard rc == 0 else { throw failure("landlock_restrict_self", -rc) }
        return Applied(abi: abi, network: net != 0, scoped: scoped != 0)
    }

    static func failure(_ call: String, _ code: Int32, _ path: String? = nil) -> ConfinementError {
        ConfinementError(call: call, errno: code, path: path)
    }
}
