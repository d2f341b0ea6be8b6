import Glibc
import Logging
import PluginHost

// A program that embeds the supervisor with `handlesSignals` in an async main: its main thread and
// task pool exist before the host does, with no signal blocked. SIGTERM or SIGINT must stop the
// plugins and end `run`, and the program goes on: it prints `ready`, then `stopped`; the next one
// ends it, the signals' default actions given back to it.
// Usage: host-signals <plugin folder> <home>
var configuration = PluginHost.Configuration(pluginFolders: [CommandLine.arguments[1]], home: CommandLine.arguments[2])
configuration.handlesSignals = true
var logger = Logger(label: "host-signals")
logger.logLevel = .warning
let host = PluginHost(configuration: configuration, logger: logger)
let running = Task { try await host.run() }
try await host.waitUntilReady()
print("ready")
fflush(nil)
do {
    try await running.value
} catch let error as ErrorBody {  // `import PluginHost` alone brings the errors calls throw
    print("run failed: \(error.code): \(error.message)")
    exit(1)
}
print("stopped")
fflush(nil)
// The signals are the program's again: the next SIGTERM or SIGINT ends it by its default action.
sleep(60)
print("not ended by the second signal")
