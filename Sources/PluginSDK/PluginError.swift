import PluginProtocol

/// An error a handler throws to answer with a specific code, or that a call to another plugin throws.
public struct PluginError: Error, Sendable, Equatable, CustomStringConvertible {
    /// One of the protocol's error codes (`notFound`, `unavailable`, `timeout`, `denied`, `badRequest`,
    /// `pluginError`, ...) or a plugin's own.
    public var code: String
    public var message: String

    public init(code: String, message: String) {
        self.code = code
        self.message = message
    }

    public init(_ code: ErrorCode, _ message: String) {
        self.init(code: code.rawValue, message: message)
    }

    public static func badRequest(_ message: String) -> PluginError { PluginError(.badRequest, message) }
    public static func notFound(_ message: String) -> PluginError { PluginError(.notFound, message) }

    public var description: String { "\(code): \(message)" }
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
