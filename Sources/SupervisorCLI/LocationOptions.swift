import ArgumentParser

/// Where a supervisor lives: `start` makes it there, every client command looks for it there.
struct LocationOptions: ParsableArguments {
    @Option(help: "The home folder: data, installed plugins, control socket, lock (default: $SUPERVISOR_HOME or ~/.local/share/sandboxed-plugins).")
    var home: String?

    @Option(help: "The control socket (default: $SUPERVISOR_SOCKET, else <home>/supervisor.sock).")
    var socket: String?
}
