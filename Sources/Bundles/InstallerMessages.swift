#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif
import PluginProtocol
import Protocol

/// What the supervisor (or the CLI, offline) asks `supervisor-installer` to do. Downloading,
/// unpacking and signature checks run in that separate process, so the code that parses untrusted
/// archives and HTTP answers (libcurl, libarchive) never runs inside the supervisor, and the
/// supervisor and CLI start without loading those libraries.
public struct InstallRequest: Codable, Sendable {
    public enum Operation: String, Codable, Sendable {
        /// Download (or read) an archive, check it, unpack it, preflight it: a `BundleStore.Staged`.
        case stage
        /// Fetch the catalog with a conditional GET into `<home>/cache`: a `CatalogLoaded`.
        case catalog
        /// Download one file with a conditional GET: a `Fetched`.
        case fetch
        /// Diagnosis: confine itself as for `stage`, then try to read and write each of `paths` and
        /// make a call the filter refuses: `probed`. Shows what the installer's sandbox lets through.
        case probe
    }

    public var operation: Operation
    public var home: String
    public var lowSpeedSeconds: Int
    public var maxBytes: Int
    // stage
    public var source: String?
    public var entry: CatalogEntry?
    public var force: Bool?
    public var allowUnsigned: Bool?
    public var trustedKeys: [String]?
    /// Trusted keys that expire: key (base64) → RFC 3339 time.
    public var keyExpiries: [String: String]?
    /// Keys no signature is accepted from any more (base64).
    public var revokedKeys: [String]?
    /// The catalog may come without a `.sig` (migration; config `catalogSignatures: "optional"`).
    public var catalogSignaturesOptional: Bool?
    public var sandbox: Bool?
    public var workerExecutable: String?
    public var runtimePaths: [String]?
    public var otherBundles: [String: String]?
    // catalog and fetch
    public var url: String?
    public var destination: String?
    public var etag: String?
    public var lastModified: String?
    // probe
    public var paths: [String]?

    public init(operation: Operation, home: String, lowSpeedSeconds: Int, maxBytes: Int) {
        self.operation = operation
        self.home = home
        self.lowSpeedSeconds = lowSpeedSeconds
        self.maxBytes = maxBytes
    }

    /// The environment variable the request travels in.
    public static let environmentVariable = "SP_INSTALL_REQUEST"
}

/// The catalog as the installer fetched it.
public struct CatalogLoaded: Codable, Sendable {
    public var entries: [CatalogEntry]
    /// `downloaded`, `notModified` (a 304), or `cached (why)` when the server failed.
    public var source: String
    /// Something the supervisor should log (an unsigned catalog accepted under `catalogSignatures: "optional"`).
    public var warning: String?
    /// The accepted catalog's version, when it has one.
    public var version: Int?
    public init(entries: [CatalogEntry], source: String, warning: String? = nil, version: Int? = nil) {
        self.entries = entries
        self.source = source
        self.warning = warning
        self.version = version
    }
}

/// One conditional download's outcome.
public struct Fetched: Codable, Sendable {
    public var notModified: Bool
    public var etag: String?
    public var lastModified: String?
    public init(notModified: Bool, etag: String?, lastModified: String?) {
        self.notModified = notModified
        self.etag = etag
        self.lastModified = lastModified
    }
}

/// One line of the installer's output: progress on the way, then exactly one result or error.
public struct InstallerLine: Codable, Sendable {
    /// The control socket's progress report (ControlReplies.swift): the supervisor passes the
    /// installer's on to the client that asked, so both are one value (the installer sends no
    /// `message`, which JSON then leaves out).
    public typealias Progress = ProgressReport

    public var progress: Progress?
    /// A preflight worker the installer spawned (refused on the control socket like any worker).
    public var preflightPID: Int32?
    public var staged: BundleStore.Staged?
    public var catalog: CatalogLoaded?
    public var fetched: Fetched?
    public var probed: Probed?
    public var error: ErrorBody?
    /// The installer's own sandbox, in its first line: the layers in force, and those missing with why.
    public var sandbox: [String]?
    public var sandboxMissing: [String]?

    public init() {}
}

extension InstallerLine {
    /// A result or an error (the last line), not progress.
    public var isAnswer: Bool { staged != nil || catalog != nil || fetched != nil || probed != nil || error != nil }
}

/// What a `probe` found: for each path, the errno of opening it for reading and for writing
/// (0: it opened), and the errno of a `chroot("/")`, which the installer's filter refuses.
public struct Probed: Codable, Sendable {
    public struct Access: Codable, Sendable {
        public var path: String
        public var read: Int32
        public var write: Int32
        public init(path: String, read: Int32, write: Int32) {
            self.path = path
            self.read = read
            self.write = write
        }
    }
    public var paths: [Access]
    public var chroot: Int32
    public init(paths: [Access], chroot: Int32) {
        self.paths = paths
        self.chroot = chroot
    }
}
