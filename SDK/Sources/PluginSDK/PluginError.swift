import PluginProtocol

/// An error a handler throws to answer with a specific code, or that a call to another plugin throws:
/// the protocol's error object itself (`code` is one of the protocol's codes, `notFound`,
/// `unavailable`, `timeout`, `denied`, `badRequest`, `pluginError`, ..., or a plugin's own).
public typealias PluginError = ErrorBody

extension ErrorBody {
    /// A `badRequest` error: the caller's params or request are wrong.
    public static func badRequest(_ message: String) -> ErrorBody { ErrorBody(.badRequest, message) }
    /// A `notFound` error: what the call names does not exist.
    public static func notFound(_ message: String) -> ErrorBody { ErrorBody(.notFound, message) }
}

/// The parameters of a method that takes none. Decodes from anything (absent, `null`, `{}`).
public struct Empty: Codable, Sendable, Equatable {
    /// The one value.
    public init() {}
    /// Reads nothing: any value decodes.
    public init(from decoder: any Decoder) throws {}
    /// Writes `null`.
    public func encode(to encoder: any Encoder) throws {
        var c = encoder.singleValueContainer()
        try c.encodeNil()
    }
}
