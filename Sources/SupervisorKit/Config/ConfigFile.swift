#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif
import BundleModel
import Bundles
import LinuxSupport
import PluginProtocol
import SupervisorCore

/// The config file (`--config FILE`, docs/operations.md): a JSON object whose keys are the settings
/// below, each listed once with how it is checked. An unknown key is refused, so a typo is not
/// silently ignored.
extension SupervisorConfig {
    /// Applies a config file on top of these settings. Options given on the command line win, so the
    /// caller applies them after this.
    public mutating func apply(configFile path: String) throws(SupervisorError) {
        let bytes: [UInt8]
        do { bytes = try FileSystem.readFile(path, limit: 1 << 20) } catch {
            throw SupervisorError.config(file: path, reason: "cannot read: \(error)")
        }
        try apply(configText: bytes, file: path)
    }

    /// Applies `bytes`, the text of the config file at `path` (read now, or as an upgrade's
    /// snapshot kept it), and keeps it (`configFileText`).
    public mutating func apply(configText bytes: [UInt8], file path: String) throws(SupervisorError) {
        let values: [String: ConfigValue]
        switch try? JSONDecoder().decode(ConfigValue.self, from: Data(bytes)) {
        case .object(let fields)?:
            // Strict JSON, as a manifest is read (with the place of the fault): the decoder forgives
            // a trailing comma, and reads bytes that are not UTF-8 as something else.
            if let problem = Manifest.strictJSONProblem(bytes) { throw SupervisorError.config(file: path, reason: "not a valid config: \(problem)") }
            values = fields
        case let other?: throw SupervisorError.config(file: path, reason: "not a valid config: it holds \(other.shown), not a JSON object of settings")
        case nil:
            let why = Manifest.strictJSONProblem(bytes).map { ": \($0)" } ?? ""
            throw SupervisorError.config(file: path, reason: "not a valid config: not JSON (a JSON object of settings, UTF-8)\(why)")
        }
        if let duplicate = DuplicateKeys.first(in: bytes) { throw SupervisorError.config(file: path, reason: DuplicateKeys.describe(duplicate)) }
        for (key, value) in values.sorted(by: { $0.key < $1.key }) {
            guard let setting = Self.settings[key] else {
                throw SupervisorError.config(file: path, reason: "unknown key '\(key)'; known keys: \(Self.settings.keys.sorted().joined(separator: ", "))")
            }
            do { try setting(&self, value) } catch {
                throw SupervisorError.config(file: path, reason: "'\(key)' \((error as? SettingError)?.reason ?? "\(error)")")
            }
        }
        // Strict JSON is UTF-8.
        configFileText = String(decoding: bytes, as: UTF8.self)
    }

    typealias Setting = @Sendable (inout SupervisorConfig, ConfigValue) throws -> Void

    static let settings: [String: Setting] = [
        "plugins": { config, value in
            let folders = try value.strings()
            if let i = folders.firstIndex(of: "") { throw SettingError("[\(i)] is empty; give a folder's path") }
            config.pluginDirectories = folders
        },
        "socket": { config, value in
            let path = try value.string()
            guard !path.isEmpty else { throw SettingError("is empty; give the control socket's path (or leave it out for <home>/supervisor.sock)") }
            config.socketPath = path
        },
        "maxFrameBytes": { config, value in
            // Below a MiB a worker's own `hello` (up to 1,024 idempotent names) or a client's
            // `stop` may not fit: every plugin would crash-loop, and no command reach the supervisor.
            let n = try value.integer()
            guard (SupervisorConfig.smallestFrameLimit...(1 << 30)).contains(n) else {
                throw SettingError("is \(n); it is from \(SupervisorConfig.smallestFrameLimit) (1 MiB: a worker's hello and every command must fit) to 1073741824 (1 GiB) bytes")
            }
            config.maxFrameBytes = n
        },
        "maxPayloadMB": positive(\.maxPayloadMB, atMost: 1 << 20, "a TiB"),
        "startupTimeoutMs": positive(\.startupTimeoutMs, atMost: 86_400_000, "a day"),
        "callTimeoutMs": positive(\.callTimeoutMs, atMost: 86_400_000, "a day"),
        "streamIdleTimeoutMs": positive(\.streamIdleTimeoutMs, atMost: 86_400_000, "a day"),
        "shutdownGraceMs": positive(\.shutdownGraceMs, atMost: 86_400_000, "a day"),
        "callQueueLimit": positive(\.callQueueLimit, atMost: 1_000_000, "a million"),
        "drainTimeoutMs": positive(\.drainTimeoutMs, atMost: 86_400_000, "a day"),
        "updateGraceSeconds": positive(\.updateGraceSeconds, atMost: 86_400, "a day"),
        "restartLimit": positive(\.restartLimit, atMost: 1_000_000, "a million"),
        "restartWindowSeconds": positive(\.restartWindowSeconds, atMost: 86_400, "a day"),
        "restartBackoffBaseMs": positive(\.restartBackoffBaseMs, atMost: 86_400_000, "a day"),
        "restartBackoffMaxMs": positive(\.restartBackoffMaxMs, atMost: 86_400_000, "a day"),
        "restartDependents": { $0.restartDependents = try $1.bool() },
        "pingIntervalMs": positive(\.pingIntervalMs, atMost: 86_400_000, "a day"),
        "pingTimeoutMs": positive(\.pingTimeoutMs, atMost: 86_400_000, "a day"),
        "activation": oneOf(\.activation),
        "idleStopMs": { config, value in
            let ms = try value.integer()
            guard (1...86_400_000).contains(ms) else { throw SettingError("is \(ms); it is from 1 to 86400000 (a day) milliseconds") }
            config.idleStopMs = ms
        },
        "floodLogsPerSecond": { config, value in
            let rate = try value.integer()
            guard rate > Router.logsPerSecond else { throw SettingError("is \(rate); it must be over the \(Router.logsPerSecond) log messages a second a plugin may send (more are dropped; this many kill it)") }
            config.floodLogsPerSecond = rate
        },
        "idleCheckIntervalMs": positive(\.idleCheckIntervalMs, atMost: 86_400_000, "a day"),
        "sandbox": { $0.sandboxEnabled = try $1.bool() },
        "workerCgroups": { $0.workerCgroups = try $1.bool() },
        "peerLinks": { $0.peerLinks = try $1.bool() },
        "workerSpinMicroseconds": { config, value in
            let us = try value.integer()
            guard (0...1000).contains(us) else { throw SettingError("is \(us); it is from 0 (never) to 1000 microseconds") }
            config.workerSpinMicroseconds = us
        },
        "workerStart": oneOf(\.workerStart),
        "standbyWorkers": oneOf(\.standbyWorkers),
        "requireSandboxLayers": { config, value in
            config.requiredSandboxLayers = try value.strings().map { name in
                guard let layer = SandboxLayer(rawValue: name), SandboxLayer.requirable.contains(layer) else {
                    throw SettingError("names '\(name)', which is not a sandbox layer; layers: \(SandboxLayer.requirable.map(\.rawValue).joined(separator: ", "))")
                }
                return layer
            }
        },
        "catalog": { config, value in
            let url = try value.string()
            guard ["http://", "https://", "file://"].contains(where: { url.lowercased().hasPrefix($0) && url.count > $0.count }) else {
                throw SettingError("is '\(url)'; it is an http://, https:// or file:// URL")
            }
            config.catalogURL = url
        },
        "trustedKeys": { config, value in
            // Each a base64 key, or {"key": "<base64>", "expires": "<RFC 3339>"}.
            var keys: [String] = []
            var expiries: [String: String] = [:]
            for (i, item) in try value.items().enumerated() {
                let key: String
                switch item {
                case .string(let text): key = text
                case .object(let fields):
                    for name in fields.keys where name != "key" && name != "expires" {
                        throw SettingError("[\(i)] has an unknown key '\(name)'; known keys: key, expires")
                    }
                    guard case .string(let text)? = fields["key"] else { throw SettingError("[\(i)] needs \"key\": a base64 Ed25519 public key") }
                    key = text
                    if let expires = fields["expires"] {
                        let when = try expires.string()
                        guard RFC3339.date(when) != nil else { throw SettingError("[\(i)] expires '\(when)' is not an RFC 3339 time (like 2027-01-31T00:00:00Z)") }
                        expiries[key] = when
                    }
                default: throw SettingError("[\(i)] must be a base64 key or {\"key\": ..., \"expires\": ...}")
                }
                try checkKey(key, at: i)
                keys.append(key)
            }
            config.trustedKeys = keys
            config.keyExpiries = expiries
        },
        "revokedKeys": { config, value in
            let keys = try value.strings()
            for (i, key) in keys.enumerated() { try checkKey(key, at: i) }
            config.revokedKeys = keys
        },
        "catalogSignatures": { config, value in
            switch try value.string() {
            case "required": config.catalogSignaturesOptional = false
            case "optional": config.catalogSignaturesOptional = true
            case let other: throw SettingError("must be \"required\" or \"optional\", got \"\(other)\"")
            }
        },
        "updates": { $0.updatesEnabled = try $1.bool() },
        "downloadLowSpeedSeconds": positive(\.downloadLowSpeedSeconds, atMost: 86_400, "a day"),
        "downloadMaxBytes": positive(\.downloadMaxBytes, atMost: 1 << 40, "a TiB"),
        "metrics": { config, value in
            let fields = try value.object()
            for key in fields.keys where key != "listen" {
                throw SettingError("has an unknown key '\(key)'; known keys: listen")
            }
            if let listen = fields["listen"] {
                let text = try listen.string()
                do throws(MetricsEndpoint.Invalid) { _ = try MetricsEndpoint(text) } catch { throw SettingError(".listen \(error.reason)") }
                config.metricsListen = text
            }
        },
    ]

    /// A publisher key: base64 of a raw 32-byte Ed25519 public key.
    private static func checkKey(_ key: String, at i: Int) throws(SettingError) {
        guard Data(base64Encoded: key)?.count == 32 else { throw SettingError("[\(i)] is not a base64 Ed25519 public key (32 bytes)") }
    }

    /// One of a choice's names (`it is "a", "b" or "c"` when not).
    private static func oneOf<Choice: RawRepresentable & CaseIterable>(_ field: WritableKeyPath<SupervisorConfig, Choice> & Sendable) -> Setting
        where Choice.RawValue == String {
        { config, value in
            let name = try value.string()
            guard let choice = Choice(rawValue: name) else {
                let names = Choice.allCases.map { "\"\($0.rawValue)\"" }
                throw SettingError("is '\(name)'; it is " + names.dropLast().joined(separator: ", ") + " or " + names.last!)
            }
            config[keyPath: field] = choice
        }
    }

    /// A whole number from 1 to `most` (`named`: how the largest is said, "a day"): bounded so that
    /// no deadline, size or count the supervisor works out from it can overflow.
    private static func positive(_ field: WritableKeyPath<SupervisorConfig, Int> & Sendable, atMost most: Int, _ named: String) -> Setting {
        { config, value in
            let n = try value.integer()
            guard n > 0 else { throw SettingError("must be positive, got \(n)") }
            guard n <= most else { throw SettingError("is \(n); it is at most \(most) (\(named))") }
            config[keyPath: field] = n
        }
    }
}

/// Why one setting's value is refused (completed with the key and file by `apply`).
struct SettingError: Error {
    var reason: String
    init(_ reason: String) { self.reason = reason }
}

/// One setting's JSON value.
indirect enum ConfigValue: Decodable {
    case bool(Bool), integer(Int), string(String), strings([String]), object([String: ConfigValue]), list([ConfigValue]), other(String)

    init(from decoder: any Decoder) throws {
        let c = try decoder.singleValueContainer()
        if let b = try? c.decode(Bool.self) { self = .bool(b) }
        else if let i = try? c.decode(Int.self) { self = .integer(i) }
        else if let s = try? c.decode(String.self) { self = .string(s) }
        else if let list = try? c.decode([String].self) { self = .strings(list) }
        else if let fields = try? c.decode([String: ConfigValue].self) { self = .object(fields) }
        else if let list = try? c.decode([ConfigValue].self) { self = .list(list) }
        else if let d = try? c.decode(Double.self) {
            self = .other(d.rounded() == d ? "\(d), a number too large for a whole number" : "the fractional number \(d)")
        }
        // A list or an object of any values decodes above: what is left is a number no Double holds (1e400).
        else { self = .other(c.decodeNil() ? "null" : "a number too large to read") }
    }

    func bool() throws(SettingError) -> Bool {
        guard case .bool(let b) = self else { throw SettingError("must be true or false, got \(shown)") }
        return b
    }

    func integer() throws(SettingError) -> Int {
        guard case .integer(let i) = self else { throw SettingError("must be a whole number, got \(shown)") }
        return i
    }

    func string() throws(SettingError) -> String {
        guard case .string(let s) = self else { throw SettingError("must be a string, got \(shown)") }
        return s
    }

    func strings() throws(SettingError) -> [String] {
        guard case .strings(let list) = self else { throw SettingError("must be a list of strings, got \(shown)") }
        return list
    }

    /// A list of anything (strings, objects).
    func items() throws(SettingError) -> [ConfigValue] {
        switch self {
        case .strings(let list): return list.map { .string($0) }
        case .list(let list): return list
        default: throw SettingError("must be a list, got \(shown)")
        }
    }

    func object() throws(SettingError) -> [String: ConfigValue] {
        guard case .object(let fields) = self else { throw SettingError("must be an object, got \(shown)") }
        return fields
    }

    fileprivate var shown: String {
        switch self {
        case .bool(let b): return "\(b)"
        case .integer(let i): return "\(i)"
        case .string(let s): return "\"\(s)\""
        case .strings(let list): return list.count == 1 ? "a list of 1 string" : "a list of \(list.count) strings"
        case .object: return "an object"
        case .list(let list): return list.count == 1 ? "a list of 1 item" : "a list of \(list.count) items"
        case .other(let what): return what
        }
    }
}
