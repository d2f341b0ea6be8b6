import Dispatch
import Glibc
import Logging
import PluginHost

// A program that embeds the supervisor with `handlesSignals`, its main thread and task pool made
// before the host, with no signal blocked: SIGTERM or SIGINT must stop the plugins and end `run`,
// and the program goes on (it prints `ready`, then `stopped`); the next one ends it, what the
// program had for the signals given back. The main thread waits in dispatch's main loop (as an
// async main's does), or, with `sync`, in a plain wait of its own.
// Usage: host-signals <plugin folder> <home> [async|sync]
let sync = CommandLine.arguments.count > 3 && CommandLine.arguments[3] == "sync"
// As a program started from a shell is: no signal blocked (a test runner's blocked mask is
// inherited by what it spawns).
var none = sigset_t()
sigemptyset(&none)
sigprocmask(SIG_SETMASK, &none, nil)
var configuration = PluginHost.Configuration(pluginFolders: [CommandLine.arguments[1]], home: CommandLine.arguments[2])
configuration.handlesSignals = true
var logger = Logger(label: "host-signals")
logger.logLevel = .warning
// Made on the main thread, before any task runs.
let host = PluginHost(configuration: configuration, logger: logger)
let stopped = DispatchSemaphore(value: 0)

/// Runs the host until a signal stops it; `import PluginHost` alone brings the errors calls throw.
@Sendable func serve(_ host: PluginHost, _ stopped: DispatchSemaphore) async {
    let running = Task { try await host.run() }
    do {
        try await host.waitUntilReady()
        print("ready")
        fflush(nil)
        try await running.value
    } catch let error as ErrorBody {
        print("run failed: \(error.code): \(error.message)")
        exit(1)
    } catch {
        print("run failed: \(error)")
        exit(1)
    }
    print("stopped")
    fflush(nil)
    stopped.signal()
}

/// After the host: the next signal's default action ends the program; this is reached only if not.
func afterTheHost(_ stopped: DispatchSemaphore) -> Never {
    stopped.wait()
    sleep(60)
    print("not ended by the second signal")
    exit(0)
}

Task.detached { [host, stopped] in await serve(host, stopped) }
if sync {
    afterTheHost(stopped)
} else {
    DispatchQueue.global().async { [stopped] in afterTheHost(stopped) }
    dispatchMain()
}
