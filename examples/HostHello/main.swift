import Glibc
import Logging
import PluginHost

// The supervisor inside this program: the example plugins, a call, a crash heard and the restart.
let host = PluginHost(configuration: .init(pluginFolders: [CommandLine.arguments[1]], home: "/tmp/host-hello"),
                      logger: Logger(label: "host-hello"))
try await withThrowingDiscardingTaskGroup { group in
    group.addTask { try await host.run() }
    try await host.waitUntilReady()
    print(try await host.call("com.example.greeter", "greet", ["name": "Ada"], as: [String: String].self))
    var events = host.events(plugin: "com.example.greeter").makeAsyncIterator()
    let pid = try await host.status().first { $0.identifier == "com.example.greeter" }?.pid
    kill(pid ?? 0, SIGKILL)                                  // a crash, on purpose
    while let event = try await events.next() {
        print(event.event, event.pid ?? 0, event.lastExit?.signal ?? "")
        if event.event == .started { break }
    }
    print(try await host.call("com.example.greeter", "greet", ["name": "again"], as: [String: String].self))
    await host.shutdown()
}
