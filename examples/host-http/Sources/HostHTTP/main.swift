import Hummingbird
import Logging
import PluginHost
import PluginProtocol
import ServiceLifecycle

// host-http [PLUGIN-FOLDER] — env: PORT (default 8080), PLUGIN_HOME (default /tmp/host-http-home).
// `GET /plugins/<id>/<path>?<query>` answers what `plugin://<id>/<path>?<query>` opens; SIGTERM or
// SIGINT stops the HTTP server, then the plugins in reverse dependency order, then the program.
let environment = Environment()
let folder = CommandLine.arguments.count > 1 ? CommandLine.arguments[1] : "plugins"
let port = environment.get("PORT").flatMap(Int.init) ?? 8080
var logger = Logger(label: "host-http")
logger.logLevel = environment.get("LOG_LEVEL").flatMap(Logger.Level.init(rawValue:)) ?? .info

let host = PluginHost(configuration: .init(pluginFolders: [folder], home: environment.get("PLUGIN_HOME") ?? "/tmp/host-http-home"),
                      logger: logger)

let router = Router()
router.get("/plugins/:id/**") { request, context -> Response in
    let id = context.parameters.get("id") ?? ""
    let path = context.parameters.getCatchAll().joined(separator: "/")
    let query = request.uri.query.map { "?" + $0 } ?? ""
    do {
        let json = try await host.openJSON("plugin://\(id)/\(path)\(query)")
        return Response(status: .ok, headers: [.contentType: "application/json"], body: .init(byteBuffer: ByteBuffer(bytes: json)))
    } catch let error as ErrorBody {
        // The plugin's or the supervisor's error, as JSON, with the HTTP status that says the same.
        let status: HTTPResponse.Status = switch error.code {
        case "notFound": .notFound
        case "denied": .forbidden
        case "badRequest": .badRequest
        case "timeout": .gatewayTimeout
        case "unavailable": .serviceUnavailable
        default: .badGateway
        }
        let body = (try? ProtocolJSON.encode(["error": error])) ?? []
        return Response(status: status, headers: [.contentType: "application/json"], body: .init(byteBuffer: ByteBuffer(bytes: body)))
    }
}
router.get("/health") { _, _ -> String in
    let running = try await host.status().filter { $0.state == "running" }.count
    return "\(running) plugins running\n"
}

let app = Application(router: router, configuration: .init(address: .hostname("127.0.0.1", port: port)), logger: logger)
// Started in this order, stopped in the reverse: no request reaches a plugin that is stopping.
let group = ServiceGroup(configuration: .init(services: [host, app], gracefulShutdownSignals: [.sigterm, .sigint], logger: logger))
try await group.run()
