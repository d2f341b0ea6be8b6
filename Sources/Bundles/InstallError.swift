import PluginProtocol

/// Why an install, update, uninstall or catalog fetch failed: a code that travels unchanged from
/// `supervisor-installer` through the supervisor to the CLI (`code: message`), and the message.
public struct InstallError: Error, CustomStringConvertible, Sendable, Equatable {
    public enum Code: String, Sendable, Codable, CaseIterable {
        /// The archive is unreadable or holds something unsafe (SPEC §9's archive rules).
        case archiveRefused
        /// A digest or signature does not match, or is missing, or no trusted key is configured.
        case integrityFailed
        /// A download failed (transport, HTTP status, size limit, stall).
        case downloadFailed
        /// The catalog is unreadable or malformed.
        case catalogInvalid
        /// The catalog's signature is missing, bad, or not by a trusted, current, unrevoked key.
        case catalogUnsigned
        /// The catalog is older than the last one accepted, or the same version with other bytes.
        case catalogRollback
        /// The catalog is past its `expires`.
        case catalogExpired
        /// The bundle's plugin.json is invalid.
        case invalidManifest
        /// A downgrade or reinstall without --force, or a version that does not match the catalog.
        case versionRefused
        /// The plugin belongs to another folder, no variant of it fits this host, or its dependencies
        /// cannot be met here.
        case conflict
        /// The new version did not load (preflight) or did not start (rolled back).
        case loadFailed
        /// A file-system step (staging, swap, removal) failed.
        case fileSystem
        /// The request itself was malformed (a bug, or a tool run by hand).
        case internalError
    }

    public var code: Code
    public var message: String

    public init(_ code: Code, _ message: String) {
        self.code = code
        self.message = message
    }

    /// An installer's answer as it came over the pipe; an unknown code is kept as an internal error.
    public init(body: ErrorBody) {
        self.init(Code(rawValue: body.code) ?? .internalError, body.message)
    }

    public var description: String { message }

    /// The reply error the CLI shows as `code: message`.
    public var body: ErrorBody { ErrorBody(code: code.rawValue, message: message) }
}
