import Foundation
import Logging
import NIOHTTP1
import PluginHost
import PluginProtocol
import ServiceLifecycle

// host-http [PLUGIN-FOLDER] — env: PORT (default 8080), PLUGIN_HOME (default /tmp/host-http-home).
// `GET /plugins/<id>/<path>?<query>` answers what `plugin://<id>/<path>?<query>` opens; SIGTERM or
// SIGINT stops the HTTP server, then the plugins in reverse dependency order, then the program.
let environment = ProcessInfo.processInfo.environment
let folder = CommandLine.arguments.count > 1 ? CommandLine.arguments[1] : "plugins"
let port = environment["PORT"].flatMap(Int.init) ?? 8080
var logger = Logger(label: "host-http")
logger.logLevel = environment["LOG_LEVEL"].flatMap(Logger.Level.init(rawValue:)) ?? .info

let host = PluginHost(configuration: .init(pluginFolders: [folder], home: environment["PLUGIN_HOME"] ?? "/tmp/host-http-home"),
                      logger: logger)

let server = HTTPServer(host: "127.0.0.1", port: port, logger: logger) { method, uri in
    guard method == .GET else { return .text(.methodNotAllowed, "only GET\n") }
    let (path, query) = split(uri)
    if path == "/health" {
        let running = try await host.status().filter { $0.state == "running" }.count
        return .text(.ok, "\(running) plugins running\n")
    }
    // /plugins/<id>/<rest>
    let parts = path.split(separator: "/", maxSplits: 2, omittingEmptySubsequences: false)
    guard parts.count >= 3, parts[0].isEmpty, parts[1] == "plugins", !parts[2].isEmpty else {
        return .text(.notFound, "not found: GET /plugins/<id>/<path> or /health\n")
    }
    let rest = parts[2].split(separator: "/", maxSplits: 1, omittingEmptySubsequences: false)
    let id = rest[0], tail = rest.count > 1 ? rest[1] : ""
    do {
        return .json(.ok, try await host.openJSON("plugin://\(id)/\(tail)\(query)"))
    } catch let error as ErrorBody {
        // The plugin's or the supervisor's error, as JSON, with the HTTP status that says the same.
        let status: HTTPResponseStatus = switch error.code {
        case "notFound": .notFound
        case "denied": .forbidden
        case "badRequest": .badRequest
        case "timeout": .gatewayTimeout
        case "unavailable": .serviceUnavailable
        default: .badGateway
        }
        return .json(status, (try? ProtocolJSON.encode(["error": error])) ?? [])
    }
}

/// `/a/b?x=1` → (`/a/b`, `?x=1`).
func split(_ uri: String) -> (path: String, query: String) {
    guard let mark = uri.firstIndex(of: "?") else { return (uri, "") }
    return (String(uri[..<mark]), String(uri[mark...]))
}

// Started in this order, stopped in the reverse: no request reaches a plugin that is stopping.
let group = ServiceGroup(configuration: .init(services: [host, server], gracefulShutdownSignals: [.sigterm, .sigint], logger: logger))
try await group.run()
