#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif
import PluginProtocol

/// A plugin bundle's `plugin.json` (SPEC §2), validated.
public struct Manifest: Sendable {
    public struct Dependency: Sendable, Equatable {
        public var identifier: String
        public var range: String?
    }

    public enum RestartPolicy: String, Sendable, Codable {
        case onFailure = "on-failure", always, never
    }

    public struct Limits: Sendable, Equatable {
        public var memoryMB: Int?
        public var softMemoryMB: Int?
        public var openFiles: Int?
        public var callTimeoutMs: Int?
        /// CPU time per 100 ms, in percent of one CPU (200: two CPUs), through the worker's cgroup.
        public var cpuPercent: Int? = nil
        /// How long `startup` may take (hello included); the supervisor's `startupTimeoutMs` otherwise.
        public var startupTimeoutMs: Int? = nil
        /// How long a stream to or from the plugin may go without a chunk (SPEC §13); the
        /// supervisor's `streamIdleTimeoutMs` otherwise.
        public var streamIdleTimeoutMs: Int? = nil
        /// The largest bytes (SPEC §13) a call or stream may bring the plugin, in MiB; the
        /// supervisor's `maxPayloadMB` (itself at most that) otherwise.
        public var maxPayloadMB: Int? = nil
        /// How many times a call the plugin had started is sent again after its worker crashed, when
        /// its method is idempotent (SPEC §15): 0...10.
        public var retries: Int = Limits.defaultRetries

        /// `retries` when the manifest gives none.
        public static let defaultRetries = 1
        /// The most `retries` may be: each retry is one more crash a call may cause.
        public static let maxRetries = 10
        /// `memoryMB` when the manifest gives none.
        public static let defaultMemoryMB = 1024
        /// The least `memoryMB` may be: the worker itself takes about 20 MiB of the address space
        /// its RLIMIT_DATA counts (its runtime, its threads' stacks) before the plugin allocates.
        public static let minimumMemoryMB = 32
        /// The least `openFiles` may be: the worker holds up to 8 descriptors of its own (the
        /// standard streams, its sockets, the taken page) and the loader opens more.
        public static let minimumOpenFiles = 16
    }

    /// Live resources (LiveBundle): files refreshed from `baseURL` at launch or daily.
    public struct Resources: Sendable, Equatable {
        public var baseURL: String
        public var files: [String]
        public var daily: Bool
    }

    public struct Variant: Sendable {
        public var library: String
        public var requires: [String: String]
    }

    /// When a plugin's worker starts.
    public enum Activation: String, Sendable, Equatable, CaseIterable {
        /// With the supervisor (and after an idle stop, when it is needed).
        case eager
        /// When something needs it: a call, open, stream or event addressed to it, or the start of
        /// a plugin that depends on it.
        case onCall
    }

    public var identifier: String
    public var version: SemanticVersion
    public var dependencies: [Dependency]
    /// The library to load, relative to the bundle; nil when `variants` decide.
    public var library: String?
    public var variants: [Variant]
    public var permissions: [Permission]
    public var restart: RestartPolicy
    public var limits: Limits
    public var resources: Resources?
    /// The methods that may run twice with the same effect (SPEC §15), each a name or a prefix
    /// ending in `*`: a call of one that the plugin had started is retried after a crash.
    public var idempotent: [String] = []
    /// When its worker starts (SPEC §16); nil: the configuration's default (`activation`, eager).
    public var activation: Activation? = nil
    /// Stopped after this long without call, stream or link traffic, and `inactive` until it is
    /// needed again (SPEC §16); nil: the configuration's default (`idleStopMs`, never).
    public var idleStopMs: Int? = nil
    /// Identifies this bundle's content on disk: the manifest's bytes and its library's size and
    /// modification time. A rescan restarts a plugin whose fingerprint changed.
    public var fingerprint: [UInt8] = []
    /// The bundle folder (absolute) and the manifest file in it.
    public var bundle: String
    public var file: String
    /// What the supervisor says about the file without refusing it: fields it ignores that look
    /// like typos of fields it has (ManifestFieldNames.swift).
    public var notes: [String] = []
}

/// A manifest that cannot be used: names the file, the field, and what is wrong.
public struct ManifestError: Error, Sendable, Equatable, CustomStringConvertible {
    public var file: String
    public var field: String?
    public var reason: String
    /// Where the field is in the file (`line 3, column 14`, or `in the object at line 1, column 1`
    /// for one that is missing); a fault of the JSON itself has its place in `reason`.
    public var place: String?

    public init(file: String, field: String?, reason: String, place: String? = nil) {
        self.file = file
        self.field = field
        self.reason = reason
        self.place = place
    }

    public var description: String {
        if let field { return "\(file): field '\(field)': \(reason)" + (place.map { " (\($0))" } ?? "") }
        return "\(file): \(reason)"
    }
}

extension Manifest {
    /// Loose shape for decoding; every check happens in `validate` so errors can name the field.
    private struct Raw: Decodable {
        var identifier: String?
        var version: String?
        var dependencies: [RawDependency]?
        var library: String?
        var variants: [RawVariant]?
        var permissions: [String]?
        var restart: String?
        var limits: RawLimits?
        var resources: RawResources?
        var idempotent: [String]?
        var activation: String?
        var idleStopMs: Int?
    }

    private struct RawResources: Decodable {
        var baseURL: String?
        var files: [String]?
        var refresh: String?
    }

    private enum RawDependency: Decodable {
        case plain(String)
        case detailed(id: String?, version: String?)

        private enum Keys: String, CodingKey { case id, version }

        init(from decoder: any Decoder) throws {
            if let s = try? decoder.singleValueContainer().decode(String.self) {
                self = .plain(s)
                return
            }
            let c = try decoder.container(keyedBy: Keys.self)
            self = .detailed(id: try c.decodeIfPresent(String.self, forKey: .id),
                             version: try c.decodeIfPresent(String.self, forKey: .version))
        }
    }

    private struct RawVariant: Decodable {
        var library: String?
        var requires: [String: String]?
    }

    private struct RawLimits: Decodable {
        var memoryMB: Int?
        var softMemoryMB: Int?
        var openFiles: Int?
        var callTimeoutMs: Int?
        var cpuPercent: Int?
        var startupTimeoutMs: Int?
        var streamIdleTimeoutMs: Int?
        var retries: Int?
        var maxPayloadMB: Int?
    }

    public static func parse(_ bytes: [UInt8], bundle: String, file: String) throws(ManifestError) -> Manifest {
        func fail(_ field: String?, _ reason: String) -> ManifestError {
            ManifestError(file: file, field: field, reason: reason, place: field.flatMap { place(of: $0, in: bytes) })
        }
        // Strict JSON first (RFC 8259: no trailing comma, no comments), with the place of the fault:
        // the decoder below forgives some of what a hand-edited file gets wrong.
        if let problem = strictJSONProblem(bytes) { throw fail(nil, problem) }
        let raw: Raw
        do {
            raw = try JSONDecoder().decode(Raw.self, from: Data(bytes))
        } catch let error as DecodingError {
            switch error {
            case .typeMismatch(_, let ctx), .valueNotFound(_, let ctx), .keyNotFound(_, let ctx):
                let path = fieldPath(ctx.codingPath)
                throw fail(path.isEmpty ? nil : path, "wrong type: \(ctx.debugDescription)")
            case .dataCorrupted(let ctx) where !ctx.codingPath.isEmpty:
                // A value of the right kind that does not fit (256.5 for an integer, a number too
                // large for one): the field is named.
                throw fail(fieldPath(ctx.codingPath), "wrong value: \(ctx.debugDescription)")
            case .dataCorrupted(let ctx):
                // Valid JSON by now: what the decoder could not take is a number no field of a
                // manifest holds (a fraction, an exponent, or past 64 bits). Named where it is.
                if let number = DuplicateKeys.firstScalar(in: bytes, where: Self.isNotAWholeNumber) {
                    throw fail(number.key, "\(String(decoding: bytes[number.offset...].prefix(40).prefix { ![0x2C, 0x7D, 0x5D, 0x0A].contains($0) }, as: UTF8.self)) is not a whole number this field can hold")
                }
                throw fail(nil, "not valid JSON: \(ctx.underlyingError.map { "\($0)" } ?? ctx.debugDescription)")
            @unknown default:
                throw fail(nil, "not valid JSON: \(error)")
            }
        } catch {
            throw fail(nil, "not valid JSON: \(error)")
        }

        guard let identifier = raw.identifier else { throw fail("identifier", "missing (required)") }
        if let problem = PluginIdentifier.problem(identifier) {
            throw fail("identifier", "'\(identifier)' is not a reverse-DNS identifier: \(problem)")
        }
        guard let versionText = raw.version else { throw fail("version", "missing (required)") }
        guard let version = SemanticVersion(versionText) else {
            throw fail("version", "'\(versionText)' is not a semantic version MAJOR.MINOR.PATCH[-pre]")
        }
        var dependencies: [Dependency] = []
        for (i, d) in (raw.dependencies ?? []).enumerated() {
            let dep: Dependency
            switch d {
            case .plain(let id): dep = Dependency(identifier: id, range: nil)
            case .detailed(let id, let range):
                guard let id else { throw fail("dependencies[\(i)].id", "missing") }
                dep = Dependency(identifier: id, range: range)
            }
            if let problem = PluginIdentifier.problem(dep.identifier) {
                throw fail("dependencies[\(i)]", "'\(dep.identifier)' is not a valid identifier: \(problem)")
            }
            if let range = dep.range, VersionRange(range) == nil {
                throw fail("dependencies[\(i)].version", "'\(range)' is not a version range like \">=1.2.0 <2.0.0\"")
            }
            guard dep.identifier != identifier else { throw fail("dependencies[\(i)]", "a plugin cannot depend on itself") }
            dependencies.append(dep)
        }
        var variants: [Variant] = []
        for (i, v) in (raw.variants ?? []).enumerated() {
            guard let lib = v.library else { throw fail("variants[\(i)].library", "missing") }
            try checkRelative(lib, field: "variants[\(i)].library", fail)
            variants.append(Variant(library: lib, requires: v.requires ?? [:]))
        }
        if let lib = raw.library { try checkRelative(lib, field: "library", fail) }
        if raw.library == nil, variants.isEmpty { throw fail("library", "missing: give `library` or `variants`") }
        if raw.library != nil, !variants.isEmpty { throw fail("variants", "give either `library` or `variants`, not both") }
        var permissions: [Permission] = []
        for (i, p) in (raw.permissions ?? []).enumerated() {
            guard let permission = Permission(p) else {
                throw fail("permissions[\(i)]", "unknown permission '\(p)'; known: \(Permission.known)")
            }
            permissions.append(permission)
        }
        var restart = RestartPolicy.onFailure
        if let r = raw.restart {
            guard let policy = RestartPolicy(rawValue: r) else {
                throw fail("restart", "'\(r)' is not one of on-failure, always, never")
            }
            restart = policy
        }
        let l = raw.limits
        for (name, value) in [("memoryMB", l?.memoryMB), ("softMemoryMB", l?.softMemoryMB), ("openFiles", l?.openFiles),
                              ("callTimeoutMs", l?.callTimeoutMs), ("cpuPercent", l?.cpuPercent), ("startupTimeoutMs", l?.startupTimeoutMs),
                              ("streamIdleTimeoutMs", l?.streamIdleTimeoutMs), ("maxPayloadMB", l?.maxPayloadMB)] {
            if let value, value <= 0 { throw fail("limits.\(name)", "must be a positive number, got \(value)") }
        }
        // Bounded so a cgroup quota (percent × 1000 µs) and a timer cannot overflow.
        if let cpu = l?.cpuPercent, cpu > 100_000 { throw fail("limits.cpuPercent", "\(cpu) is over 100000 (a thousand CPUs)") }
        if let t = l?.callTimeoutMs, t > 86_400_000 { throw fail("limits.callTimeoutMs", "\(t) is over a day") }
        if let t = l?.startupTimeoutMs, t > 86_400_000 { throw fail("limits.startupTimeoutMs", "\(t) is over a day") }
        if let mb = l?.memoryMB, mb > 1 << 30 { throw fail("limits.memoryMB", "\(mb) is over 1073741824 (a PiB)") }
        if let mb = l?.softMemoryMB, mb > 1 << 30 { throw fail("limits.softMemoryMB", "\(mb) is over 1073741824 (a PiB)") }
        if let n = l?.openFiles, n > 1 << 30 { throw fail("limits.openFiles", "\(n) is over 1073741824") }
        // Limits a worker cannot start under: refused here, not met as a load error that blames the library.
        if let mb = l?.memoryMB, mb < Limits.minimumMemoryMB {
            throw fail("limits.memoryMB", "\(mb) is under \(Limits.minimumMemoryMB): the worker itself takes about 20 MiB of it (its runtime and its threads' stacks) before the plugin allocates anything")
        }
        if let n = l?.openFiles, n < Limits.minimumOpenFiles {
            throw fail("limits.openFiles", "\(n) is under \(Limits.minimumOpenFiles): the worker holds up to 8 descriptors of its own, and loading the library opens more")
        }
        if let soft = l?.softMemoryMB, soft > l?.memoryMB ?? Limits.defaultMemoryMB {
            throw fail("limits.softMemoryMB", "\(soft) is over the hard limit (memoryMB \(l?.memoryMB ?? Limits.defaultMemoryMB)): the warning could only come after the kill")
        }
        if let t = l?.streamIdleTimeoutMs, t > 86_400_000 { throw fail("limits.streamIdleTimeoutMs", "\(t) is over a day") }
        if let mb = l?.maxPayloadMB, mb > 1 << 20 { throw fail("limits.maxPayloadMB", "\(mb) is over 1048576 (a TiB)") }
        let retries = l?.retries ?? Limits.defaultRetries
        guard (0...Limits.maxRetries).contains(retries) else {
            throw fail("limits.retries", "must be between 0 and \(Limits.maxRetries), got \(retries)")
        }
        let idempotent = raw.idempotent ?? []
        for (i, name) in idempotent.enumerated() {
            if name.isEmpty { throw fail("idempotent[\(i)]", "an empty method name; give a method's name, or a prefix ending in '*'") }
            if name.dropLast().contains("*") {
                throw fail("idempotent[\(i)]", "'\(name)' has a '*' before its end; '*' may only end a name (a prefix match, as in \"get*\")")
            }
        }
        var activation: Activation?
        if let text = raw.activation {
            guard let value = Activation(rawValue: text) else { throw fail("activation", "'\(text)' is not eager or onCall") }
            activation = value
        }
        if let ms = raw.idleStopMs, !(1...86_400_000).contains(ms) {
            throw fail("idleStopMs", "must be between 1 and 86400000 (a day), got \(ms)")
        }
        var resources: Resources?
        if let r = raw.resources {
            guard let base = r.baseURL, let scheme = ["http://", "https://", "file://"].first(where: { r.baseURL?.hasPrefix($0) == true }) else {
                throw fail("resources.baseURL", "missing or not an http(s) or file URL")
            }
            // Something after the scheme: a host for http(s) (found by the fuzzer: "https://" alone was
            // accepted and became "https:/"), a path for file.
            let rest = base.dropFirst(scheme.count)
            guard rest.contains(where: { $0 != "/" }), scheme == "file://" || rest.first != "/" else {
                throw fail("resources.baseURL", "'\(base)' has no \(scheme == "file://" ? "path" : "host") after \(scheme)")
            }
            let files = r.files ?? []
            for (i, f) in files.enumerated() {
                try checkRelative(f, field: "resources.files[\(i)]", fail)
                if f.hasPrefix(".") { throw fail("resources.files[\(i)]", "'\(f)' must not start with a dot") }
                // `<file>.download` is where a file is fetched to before it replaces the live copy.
                if f.hasSuffix(".download") { throw fail("resources.files[\(i)]", "'\(f)' ends in .download, the name a file takes while it downloads") }
                // One file cannot also be the folder of another (`a` and `a/b`), nor be listed twice.
                if let other = files[..<i].first(where: { $0 == f || $0.hasPrefix(f + "/") || f.hasPrefix($0 + "/") }) {
                    throw fail("resources.files[\(i)]", other == f ? "'\(f)' is listed twice" : "'\(f)' and '\(other)': one would be the other's folder")
                }
            }
            guard r.refresh == nil || r.refresh == "launch" || r.refresh == "daily" else {
                throw fail("resources.refresh", "'\(r.refresh!)' is not launch or daily")
            }
            resources = Resources(baseURL: base.hasSuffix("/") ? String(base.dropLast()) : base, files: files, daily: r.refresh == "daily")
        }
        var manifest = Manifest(
            identifier: identifier, version: version, dependencies: dependencies, library: raw.library,
            variants: variants, permissions: permissions, restart: restart,
            limits: Limits(memoryMB: l?.memoryMB, softMemoryMB: l?.softMemoryMB, openFiles: l?.openFiles, callTimeoutMs: l?.callTimeoutMs,
                           cpuPercent: l?.cpuPercent, startupTimeoutMs: l?.startupTimeoutMs, streamIdleTimeoutMs: l?.streamIdleTimeoutMs,
                           maxPayloadMB: l?.maxPayloadMB, retries: retries),
            resources: resources, idempotent: idempotent, activation: activation, idleStopMs: raw.idleStopMs, bundle: bundle, file: file)
        manifest.notes = misspelledFields(bytes, file: file)
        return manifest
    }

    /// Whether this stands in for an unusable plugin.json (`unusable`): a real manifest names a
    /// library or variants.
    public var isStandIn: Bool { library == nil && variants.isEmpty }

    /// What stands in for a bundle whose plugin.json cannot be used, so that `status` lists it as
    /// `failed` with the error instead of leaving it to the log: named by its identifier when that
    /// much can be read, else by its folder's name. It is never started.
    public static func unusable(bundle: String, bytes: [UInt8]) -> Manifest {
        struct Named: Decodable { var identifier: String? }
        let named = (try? JSONDecoder().decode(Named.self, from: Data(bytes)))?.identifier
        let folder = String(bundle.split(separator: "/").last ?? Substring(bundle))
        let identifier = named.flatMap { PluginIdentifier.isValid($0) ? $0 : nil } ?? folder
        var m = Manifest(identifier: identifier, version: SemanticVersion("0.0.0")!, dependencies: [], library: nil, variants: [],
                         permissions: [], restart: .never, limits: Limits(memoryMB: nil, softMemoryMB: nil, openFiles: nil, callTimeoutMs: nil),
                         resources: nil, bundle: bundle, file: bundle + "/plugin.json")
        m.fingerprint = bytes
        return m
    }

    private static func checkRelative(_ path: String, field: String, _ fail: (String?, String) -> ManifestError) throws(ManifestError) {
        if path.isEmpty || path.hasPrefix("/") || path.split(separator: "/").contains("..") {
            throw fail(field, "'\(path)' must be a path inside the bundle (relative, without ..)")
        }
    }
}
