import PluginProtocol

/// An error a handler throws to answer with a specific code, or that a call to another plugin throws:
/// the protocol's error object itself (`code` is one of the protocol's codes, `notFound`,
/// `unavailable`, `timeout`, `denied`, `badRequest`, `pluginError`, ..., or a plugin's own).
public typealias PluginError = ErrorBody

extension ErrorBody {
    public static func badRequest(_ message: String) -> ErrorBody { ErrorBody(.badRequest, message) }
    public static func notFound(_ message: String) -> ErrorBody { ErrorBody(.notFound, message) }
}

/// The parameters of a method that takes none. Decodes from anything (absent, `null`, `{}`).
public struct Empty: Codable, Sendable, Equatable {
    public init() {}
    public init(from decoder: any Decoder) throws {}
    public func encode(to encoder: any Encoder) throws {
        var c = encoder.singleValueContainer()
        try c.encodeNil()
    }
}
