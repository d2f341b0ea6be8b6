import ArgumentParser

/// Where a supervisor lives: `start` makes it there, every client command looks for it there.
struct LocationOptions: ParsableArguments {
    @Option(help: "The home folder: data, installed plugins, control socket, lock (default: $SUPERVISOR_HOME or ~/.local/share/sandboxed-plugins).")
    var home: String?

    @Option(help: "The control socket (default: $SUPERVISOR_SOCKET, else <home>/supervisor.sock).")
    var socket: String?

    /// An empty `--home` or `--socket` names nothing: refused, not read as the current folder or
    /// the default.
    func validate() throws {
        if home == "" { throw ValidationError("--home is empty; give a folder (or leave it out for the default)") }
        if socket == "" { throw ValidationError("--socket is empty; give the control socket's path (or leave it out for <home>/supervisor.sock)") }
    }
}
