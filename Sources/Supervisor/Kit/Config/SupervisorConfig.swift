#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif
#if canImport(Glibc)
import Glibc
#endif
import LinuxSupport
import PluginProtocol

/// Everything `supervisor start` can be told, with defaults that need no config file.
public struct SupervisorConfig: Sendable {
    /// The home folder: plugins, data, live resources, the control socket and the lock.
    public var home: String
    /// Folders scanned for plugin bundles: those given, and always `<home>/plugins`, where installs go.
    public var pluginDirectories: [String] {
        get { extraPluginDirectories + (extraPluginDirectories.contains(home + "/plugins") ? [] : [home + "/plugins"]) }
        set { extraPluginDirectories = newValue }
    }
    private var extraPluginDirectories: [String]
    public var socketPath: String
    /// The `plugin-worker` executable (default: beside the running supervisor).
    public var workerExecutable: String
    /// The `supervisor-installer` executable (default: beside the running supervisor).
    public var installerExecutable: String
    public var maxFrameBytes = Frame.defaultMaxBody
    public var maxJSONDepth = Frame.defaultMaxDepth
    /// A worker must say hello and answer `startup` within this.
    public var startupTimeoutMs = 10_000
    /// Default per-call timeout; a manifest's `limits.callTimeoutMs` and a call's `timeoutMs` override it.
    public var callTimeoutMs = 30_000
    /// How long `willTerminate` may take before the worker is killed.
    public var shutdownGraceMs = 5_000
    /// At most this many restarts in `restartWindowSeconds`, then `failed`.
    public var restartLimit = 5
    public var restartWindowSeconds = 60
    /// Delay before the second restart in a row; doubles each time up to `restartBackoffMaxMs`.
    public var restartBackoffBaseMs = 100
    public var restartBackoffMaxMs = 10_000
    /// Also restart dependents when a plugin restarts (OTP's rest_for_one).
    public var restartDependents = false
    /// Watchdog: ping every worker this often; one that does not answer within `pingTimeoutMs` is killed.
    public var pingIntervalMs = 1_000
    public var pingTimeoutMs = 3_000
    /// Sandbox on (default) or off (benchmarks, diagnosis).
    public var sandboxEnabled = true
    /// The plugin catalog's URL (http, https or file), for `update` and on-demand installs.
    public var catalogURL: String?
    /// Trusted publisher keys: base64 raw Ed25519 public keys.
    public var trustedKeys: [String] = []
    /// `false` switches updates off: no catalog fetches, no on-demand installs, no resource refresh.
    public var updatesEnabled = true
    /// Downloads slower than 1 KiB/s for this long are aborted; at most this many bytes.
    public var downloadLowSpeedSeconds = 15
    public var downloadMaxBytes = 256 << 20
    /// Sandbox layers the operator demands; a plugin is not started where one is missing.
    public var requiredSandboxLayers: [SandboxLayer] = []

    /// The default home: `$SUPERVISOR_HOME`, else `$XDG_DATA_HOME/sandboxed-plugins`, else
    /// `~/.local/share/sandboxed-plugins`.
    public static func defaultHome() -> String {
        let env = ProcessEnvironment.all
        if let h = env["SUPERVISOR_HOME"], !h.isEmpty { return h }
        if let x = env["XDG_DATA_HOME"], !x.isEmpty { return x + "/sandboxed-plugins" }
        return (env["HOME"] ?? "/tmp") + "/.local/share/sandboxed-plugins"
    }

    /// The control socket a CLI command talks to: `--socket`, else `$SUPERVISOR_SOCKET`, else the home's.
    public static func socketPath(option: String?, home: String?) -> String {
        if let option, !option.isEmpty { return option }
        if let s = ProcessEnvironment.all["SUPERVISOR_SOCKET"], !s.isEmpty { return s }
        return (home ?? defaultHome()) + "/supervisor.sock"
    }

    public init(home: String? = nil, pluginDirectories: [String] = [], socketPath: String? = nil, workerExecutable: String? = nil) {
        let home = home ?? Self.defaultHome()
        self.home = home
        self.extraPluginDirectories = pluginDirectories
        self.socketPath = Self.socketPath(option: socketPath, home: home)
        self.workerExecutable = workerExecutable ?? (FileSystem.executableDirectory() + "/plugin-worker")
        self.installerExecutable = FileSystem.executableDirectory() + "/supervisor-installer"
    }

    /// The config file (`--config FILE`): JSON with any of these keys; unknown keys are refused so
    /// a typo is not silently ignored.
    struct File: Decodable {
        var plugins: [String]?
        var socket: String?
        var maxFrameBytes: Int?
        var startupTimeoutMs: Int?
        var callTimeoutMs: Int?
        var shutdownGraceMs: Int?
        var restartLimit: Int?
        var restartWindowSeconds: Int?
        var restartBackoffBaseMs: Int?
        var restartBackoffMaxMs: Int?
        var restartDependents: Bool?
        var pingIntervalMs: Int?
        var pingTimeoutMs: Int?
        var sandbox: Bool?
        var requireSandboxLayers: [String]?
        var catalog: String?
        var trustedKeys: [String]?
        var updates: Bool?
        var downloadLowSpeedSeconds: Int?
        var downloadMaxBytes: Int?

        static let keys: Set<String> = [
            "plugins", "socket", "maxFrameBytes", "startupTimeoutMs", "callTimeoutMs", "shutdownGraceMs", "restartLimit",
            "restartWindowSeconds", "restartBackoffBaseMs", "restartBackoffMaxMs", "restartDependents", "pingIntervalMs",
            "pingTimeoutMs", "sandbox", "requireSandboxLayers", "updates", "catalog", "trustedKeys",
            "downloadLowSpeedSeconds", "downloadMaxBytes",
        ]
    }

    /// Applies a config file on top of these settings. Options given on the command line win, so the
    /// caller applies them after this.
    public mutating func apply(configFile path: String) throws -> Void {
        let bytes: [UInt8]
        do { bytes = try FileSystem.readFile(path, limit: 1 << 20) } catch {
            throw ConfigError(file: path, reason: "cannot read: \(error)")
        }
        struct AnyKeys: Decodable {
            var keys: [String]
            struct K: CodingKey {
                var stringValue: String
                init?(stringValue: String) { self.stringValue = stringValue }
                var intValue: Int? { nil }
                init?(intValue: Int) { nil }
            }
            init(from decoder: any Decoder) throws { keys = try decoder.container(keyedBy: K.self).allKeys.map(\.stringValue) }
        }
        let file: File
        do {
            let keys = try JSONDecoder().decode(AnyKeys.self, from: Data(bytes)).keys
            if let unknown = keys.first(where: { !File.keys.contains($0) }) {
                throw ConfigError(file: path, reason: "unknown key '\(unknown)'; known keys: \(File.keys.sorted().joined(separator: ", "))")
            }
            file = try JSONDecoder().decode(File.self, from: Data(bytes))
        } catch let e as ConfigError {
            throw e
        } catch {
            throw ConfigError(file: path, reason: "not a valid config: \(error)")
        }
        if let p = file.plugins { pluginDirectories = p }
        if let s = file.socket { socketPath = s }
        func positive(_ name: String, _ v: Int?) throws -> Int? {
            if let v, v <= 0 { throw ConfigError(file: path, reason: "'\(name)' must be positive, got \(v)") }
            return v
        }
        if let v = try positive("maxFrameBytes", file.maxFrameBytes) { maxFrameBytes = v }
        if let v = try positive("startupTimeoutMs", file.startupTimeoutMs) { startupTimeoutMs = v }
        if let v = try positive("callTimeoutMs", file.callTimeoutMs) { callTimeoutMs = v }
        if let v = try positive("shutdownGraceMs", file.shutdownGraceMs) { shutdownGraceMs = v }
        if let v = try positive("restartLimit", file.restartLimit) { restartLimit = v }
        if let v = try positive("restartWindowSeconds", file.restartWindowSeconds) { restartWindowSeconds = v }
        if let v = try positive("restartBackoffBaseMs", file.restartBackoffBaseMs) { restartBackoffBaseMs = v }
        if let v = try positive("restartBackoffMaxMs", file.restartBackoffMaxMs) { restartBackoffMaxMs = v }
        if let v = file.restartDependents { restartDependents = v }
        if let v = try positive("pingIntervalMs", file.pingIntervalMs) { pingIntervalMs = v }
        if let v = try positive("pingTimeoutMs", file.pingTimeoutMs) { pingTimeoutMs = v }
        if let v = file.sandbox { sandboxEnabled = v }
        if let v = file.catalog { catalogURL = v }
        if let v = file.trustedKeys {
            for (i, key) in v.enumerated() where Data(base64Encoded: key)?.count != 32 {
                throw ConfigError(file: path, reason: "trustedKeys[\(i)] is not a base64 Ed25519 public key (32 bytes)")
            }
            trustedKeys = v
        }
        if let v = file.updates { updatesEnabled = v }
        if let v = try positive("downloadLowSpeedSeconds", file.downloadLowSpeedSeconds) { downloadLowSpeedSeconds = v }
        if let v = try positive("downloadMaxBytes", file.downloadMaxBytes) { downloadMaxBytes = v }
        if let v = file.requireSandboxLayers {
            var layers: [SandboxLayer] = []
            for name in v {
                guard let layer = SandboxLayer(rawValue: name), SandboxLayer.requirable.contains(layer) else {
                    throw ConfigError(file: path, reason: "'requireSandboxLayers' names '\(name)', which is not a sandbox layer; layers: \(SandboxLayer.requirable.map(\.rawValue).joined(separator: ", "))")
                }
                layers.append(layer)
            }
            requiredSandboxLayers = layers
        }
    }
}

public struct ConfigError: Error, CustomStringConvertible, Sendable {
    public var file: String
    public var reason: String
    public var description: String { "config \(file): \(reason)" }
}
