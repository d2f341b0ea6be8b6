/// Where a supervisor lives: its home folder and its control socket (SPEC §6), found the same way
/// by `supervisor start`, the CLI, `SupervisorClient` and `PluginHost`.
public enum SupervisorLocation {
    /// The default home: `$SUPERVISOR_HOME`, else `$XDG_DATA_HOME/sandboxed-plugins`, else
    /// `~/.local/share/sandboxed-plugins`.
    public static func defaultHome(environment: [String: String]) -> String {
        if let h = environment["SUPERVISOR_HOME"], !h.isEmpty { return h }
        if let x = environment["XDG_DATA_HOME"], !x.isEmpty { return x + "/sandboxed-plugins" }
        return (environment["HOME"] ?? "/tmp") + "/.local/share/sandboxed-plugins"
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
