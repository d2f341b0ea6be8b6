import PluginSDK

/// The greeter: ELMaestro's `username` example, exported as an API other plugins and the CLI call.
final class Greeter: Pluggable {
    static let identifier = "com.example.greeter"

    init() {}

    struct GreetParams: Codable, Sendable { var name: String }
    struct Greeting: Codable, Sendable { var greeting: String }

    func startup(_ context: PluginContext) async throws {
        context.log(.info, "greeter is up (data folder \(context.dataDirectory))")
    }

    func exports(_ api: PluginAPI) {
        api.method("username") { "ELMaestro" }
        api.method("greet") { (p: GreetParams) in
            guard !p.name.isEmpty else { throw PluginError.badRequest("name must not be empty") }
            return Greeting(greeting: "Hello, \(p.name)!")
        }
        // plugin://com.example.greeter/hello?name=Ada
        api.route("/hello") { request in
            Greeting(greeting: "Hello, \(request.query["name"] ?? "world")!")
        }
    }
}

@_cdecl("sp_plugin_create")
public func spPluginCreate(_ host: OpaquePointer?) -> OpaquePointer? { PluginExport.create(Greeter.self, host: host) }
