#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif
import PluginProtocol

/// What a plugin is told at `startup`, and its way out: calls to other plugins, `plugin://` URIs, logs.
public struct PluginContext: Sendable {
    let runtime: PluginRuntime
    /// This plugin's identifier, from its manifest.
    public let identifier: String
    /// This plugin's version, from its manifest.
    public let version: String
    /// The plugin's own read-write data folder.
    public let dataDirectory: String
    /// The bundle folder (read-only).
    public let bundleDirectory: String
    /// The live-resources folder, where refreshed resources land (read-only to the plugin).
    public let liveDirectory: String?

    /// The W3C `traceparent` of the call or open this task is handling (nil outside one). Calls made
    /// from here carry it on by themselves; it is here for a plugin's own logs or spans.
    public var traceparent: String? { PluginRuntime.traceparent }

    /// Calls `method` of plugin `target` (which must be one of this plugin's dependencies). `Bytes`
    /// in the params travel as attachments, without base64; an answer with bytes is read `as:
    /// Bytes.self` (or a type with `Bytes` members).
    ///
    /// - Parameters:
    ///   - target: The callee's identifier.
    ///   - method: One of the methods its `exports` registers.
    ///   - params: Encoded as the call's JSON `params`.
    ///   - as: What the result decodes as.
    /// - Throws: The callee's `PluginError` as it threw it, or the supervisor's: `denied` when
    ///   `target` is not a dependency, `notFound`, `timeout`, `unavailable`; `pluginError` when the
    ///   result does not decode as `Result`.
    public func call<Params: Encodable, Result: Decodable>(
        _ target: String, _ method: String, _ params: Params, as: Result.Type = Result.self
    ) async throws -> Result {
        let answer = try await runtime.request(kind: .call, target: target, method: method) { out in
            try Coding.appendAttached(params, to: &out)
        }
        return try Self.decode(answer, as: Result.self, of: target, method)
    }

    /// An answer's result as `Result` (not async: its work stays out of the calling task's frames).
    @inline(never)
    static func decode<Result: Decodable>(_ answer: PluginRuntime.Answer, as: Result.Type, of target: String, _ method: String) throws -> Result {
        guard let bytes = answer.attachments else { return try Coding.decodeResult(Result.self, answer.result, of: "\(target).\(method)") }
        return try PluginRuntime.$attachments.withValue(bytes) { try Coding.decodeResult(Result.self, answer.result, of: "\(target).\(method)") }
    }

    /// Calls `method` of plugin `target` with no parameters.
    public func call<Result: Decodable>(_ target: String, _ method: String, as: Result.Type = Result.self) async throws -> Result {
        try await call(target, method, Empty(), as: Result.self)
    }

    /// Calls `method` of the program that hosts the plugins (SPEC §12: `target: "@host"`), allowed
    /// only where the manifest lists `host.call:<method>` (or `host.call:*`); otherwise `denied`.
    /// No host provides it: `notFound`.
    public func callHost<Params: Encodable, Result: Decodable>(_ method: String, _ params: Params, as: Result.Type = Result.self) async throws -> Result {
        try await call(Self.hostTarget, method, params, as: Result.self)
    }

    /// Calls `method` of the host program with no parameters.
    public func callHost<Result: Decodable>(_ method: String, as: Result.Type = Result.self) async throws -> Result {
        try await call(Self.hostTarget, method, Empty(), as: Result.self)
    }

    /// The `target` of a call to the host program.
    public static let hostTarget = "@host"

    /// A typed handle on another plugin's API.
    public func plugin(_ identifier: String) -> PluginClient { PluginClient(context: self, identifier: identifier) }

    /// Opens a `plugin://<identifier>/<path>?<query>` URI through the supervisor: the answer of
    /// the plugin's route for that path (`PluginAPI.route`), decoded as `Result`.
    public func open<Result: Decodable>(_ uri: String, as: Result.Type = Result.self) async throws -> Result {
        let answer = try await runtime.request(kind: .open, uri: uri)
        return try Coding.decodeResult(Result.self, answer.result, of: uri)
    }

    /// The current path of a resource: the refreshed copy in the live folder once one was downloaded,
    /// else the bundled file.
    public func resourcePath(_ name: String) -> String {
        if let live = liveDirectory {
            let candidate = live + "/" + name
            if runtime.fileExists(candidate) { return candidate }
        }
        return bundleDirectory + "/" + name
    }

    /// Sends a line to the supervisor's log, tagged with this plugin's identifier.
    public func log(_ level: LogLevel, _ message: String, metadata: [String: String]? = nil) {
        runtime.log(level, message, metadata: metadata)
    }
}

/// The level of a line a plugin logs (`PluginContext.log`): swift-log's levels, by the same names.
public enum LogLevel: String, Sendable {
    /// The most detailed: what only tracing a problem needs.
    case trace
    /// Detail for debugging.
    case debug
    /// What happens in normal operation.
    case info
    /// A normal but significant event.
    case notice
    /// Something unexpected that the plugin carries on after.
    case warning
    /// An operation failed.
    case error
    /// The plugin cannot go on.
    case critical
}

/// A typed handle on another plugin's exported API (`PluginContext.plugin(_:)`): the calls of
/// `PluginContext` with the target filled in.
public struct PluginClient: Sendable {
    let context: PluginContext
    /// The plugin this handle calls.
    public let identifier: String

    /// Calls `method` of this plugin with `params` and decodes its result as `Result`.
    public func call<Params: Encodable, Result: Decodable>(_ method: String, _ params: Params, as: Result.Type = Result.self) async throws -> Result {
        try await context.call(identifier, method, params, as: Result.self)
    }

    /// Calls `method` of this plugin with no parameters.
    public func call<Result: Decodable>(_ method: String, as: Result.Type = Result.self) async throws -> Result {
        try await context.call(identifier, method, Empty(), as: Result.self)
    }
}

/// What the supervisor puts in the `startup` event's payload.
struct StartupPayload: Decodable, Equatable {
    var identifier: String
    var version: String
    var dataDirectory: String
    var bundleDirectory: String
    var liveDirectory: String?
    var dependencies: [String]?
}

extension StartupPayload {
    /// Read by hand, as the worker reads its spec: `startup` is the first message a plugin decodes,
    /// in a fresh process where Foundation's `JSONDecoder` would cost its first use (~0.15 ms of the
    /// start; PluginProtocol's WorkerSpecReading.swift). Unknown members are skipped.
    init(reading payload: [UInt8]) throws(JSONReadingError) {
        self = try payload.withUnsafeBytes { raw in
            Result { () throws(JSONReadingError) in
                let json = JSONMembers(raw, "startup's payload")
                var identifier: String?, version: String?, dataDirectory: String?, bundleDirectory: String?
                var liveDirectory: String?, dependencies: [String]?
                try json.members(of: 0..<raw.count, "startup's payload") { (key, value) throws(JSONReadingError) in
                    switch key {
                    case "identifier": identifier = try json.string(value, key)
                    case "version": version = try json.string(value, key)
                    case "dataDirectory": dataDirectory = try json.string(value, key)
                    case "bundleDirectory": bundleDirectory = try json.string(value, key)
                    case "liveDirectory": liveDirectory = try json.optional(value) { (r) throws(JSONReadingError) in try json.string(r, key) }
                    case "dependencies": dependencies = try json.optional(value) { (r) throws(JSONReadingError) in try json.strings(r, key) }
                    default: break
                    }
                }
                return StartupPayload(identifier: try json.required(identifier, "identifier"), version: try json.required(version, "version"),
                                      dataDirectory: try json.required(dataDirectory, "dataDirectory"),
                                      bundleDirectory: try json.required(bundleDirectory, "bundleDirectory"),
                                      liveDirectory: liveDirectory, dependencies: dependencies)
            }
        }.get()
    }
}
