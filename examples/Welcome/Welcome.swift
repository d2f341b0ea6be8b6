import PluginSDK
import Synchronization

/// Depends on the greeter and calls its API, plugin to plugin, through the supervisor.
final class Welcome: Pluggable {
    static let identifier = "com.example.welcome"
    static let dependencies = ["com.example.greeter"]

    private let context = Mutex<PluginContext?>(nil)
    private let lifecycle = Mutex<[String]>([])

    init() {}

    /// A typed facade on the greeter's API, as its authors could ship it.
    struct GreeterAPI {
        let client: PluginClient
        func username() async throws -> String { try await client.call("username") }
        func greet(_ name: String) async throws -> String {
            struct P: Codable { var name: String }
            struct R: Codable { var greeting: String }
            return try await client.call("greet", P(name: name), as: R.self).greeting
        }
    }

    func startup(_ context: PluginContext) async throws {
        self.context.withLock { $0 = context }
        // The greeter is running before we get startup: call it now.
        let name = try await GreeterAPI(client: context.plugin("com.example.greeter")).username()
        context.log(.info, "welcome started; the greeter's user is \(name)")
        record("startup")
    }

    func launch() async { record("launch") }
    func memoryWarning() async { record("memoryWarning") }
    func background() async { record("background") }
    func foreground() async { record("foreground") }
    func willTerminate() async { record("willTerminate") }
    func dependencyRestarted(_ identifier: String) async { record("dependencyRestarted:\(identifier)") }

    private func record(_ event: String) { lifecycle.withLock { $0.append(event) } }

    func exports(_ api: PluginAPI) {
        // It only waits on the greeter: `.inline` runs it without thread hops (docs/abi.md).
        api.method("welcome", execution: .inline) { () async throws -> String in
            guard let context = self.context.withLock({ $0 }) else { throw PluginError(.unavailable, "not started") }
            let greeter = GreeterAPI(client: context.plugin("com.example.greeter"))
            return "Welcome back, \(try await greeter.username())! " + (try await greeter.greet("friend"))
        }
        // The events this plugin has seen, in order.
        api.method("events") { self.lifecycle.withLock { $0 } }
        // Opens a plugin:// URI on the greeter.
        api.method("openGreeter") { (p: [String: String]) async throws -> [String: String] in
            guard let context = self.context.withLock({ $0 }) else { throw PluginError(.unavailable, "not started") }
            return try await context.open("plugin://com.example.greeter/hello?name=\(p["name"] ?? "world")")
        }
    }
}

@_cdecl("sp_plugin_create")
public func spPluginCreate(_ host: OpaquePointer?) -> OpaquePointer? { PluginExport.create(Welcome.self, host: host) }
