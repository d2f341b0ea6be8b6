#if canImport(Glibc)
import Glibc
#endif

/// Where a supervisor lives: its home folder and its control socket (SPEC §6), found the same way
/// by `supervisor start`, the CLI, `SupervisorClient` and `PluginHost`.
public enum SupervisorLocation {
    /// The default home: `$SUPERVISOR_HOME`, else `$XDG_DATA_HOME/sandboxed-plugins`, else
    /// `~/.local/share/sandboxed-plugins`, `~` being `$HOME`, or where `HOME` is not set (cron,
    /// `env -i`, a unit without it) the user's home in the password database: never a folder
    /// every user can write to, such as `/tmp`, where another user could make it first.
    public static func defaultHome(environment: [String: String]) -> String {
        if let h = environment["SUPERVISOR_HOME"], !h.isEmpty { return h }
        if let x = environment["XDG_DATA_HOME"], !x.isEmpty { return x + "/sandboxed-plugins" }
        let home = environment["HOME"].flatMap { $0.isEmpty ? nil : $0 } ?? userHome() ?? "/"
        return (home == "/" ? "" : home) + "/.local/share/sandboxed-plugins"
    }

    /// This user's home folder in the password database, if it has one.
    static func userHome() -> String? {
        var entry = passwd()
        var found: UnsafeMutablePointer<passwd>?
        var size = max(Int(sysconf(Int32(_SC_GETPW_R_SIZE_MAX))), 4096)
        var buffer = [CChar](repeating: 0, count: size)
        while getpwuid_r(getuid(), &entry, &buffer, buffer.count, &found) == ERANGE, size < 1 << 20 {
            size *= 2
            buffer = [CChar](repeating: 0, count: size)
        }
        guard found != nil, let dir = entry.pw_dir else { return nil }
        let path = String(cString: dir)
        return path.isEmpty ? nil : path
    }

    /// The control socket: `socket` (`--socket`), else `$SUPERVISOR_SOCKET`, else `<home>/supervisor.sock`.
    public static func socketPath(socket: String?, home: String?, environment: [String: String]) -> String {
        if let socket, !socket.isEmpty { return socket }
        if let s = environment["SUPERVISOR_SOCKET"], !s.isEmpty { return s }
        return (home ?? defaultHome(environment: environment)) + "/supervisor.sock"
    }

    /// The home a socket path belongs to (its folder), where the home lock says whether a
    /// supervisor is starting.
    public static func home(ofSocket path: String) -> String {
        path.lastIndex(of: "/").map { String(path[..<$0]) } ?? "."
    }
}
