import Logging
import PluginProtocol

/// A plugin's `log` message as the supervisor reads it (docs/protocol.md, "log"): `level` and
/// `message` are strings, and `metadata`'s values may be any JSON. A plugin that logs a count as a
/// number, or a place as an object, is not breaking the protocol: strings stay strings, numbers
/// stay numbers (JSON logs write them as such), `true`, `false` and `null` are their words, and
/// arrays and objects nest (JSON logs flatten an object's keys as `key.inner`).
struct PluginLogLine: Decodable {
    var level: String
    var message: String
    var metadata: [String: Value]?

    /// The most metadata keys a line keeps, at each level.
    static let metadataLimit = 64

    /// `members` as a line's metadata: at most `metadataLimit` of them, keys and strings as
    /// `LogText` shows them.
    static func logged(_ members: [String: Value]) -> Logger.Metadata {
        Dictionary(members.prefix(metadataLimit).map { (LogText.shown($0.key), $0.value.logged) }, uniquingKeysWith: { first, _ in first })
    }

    /// One metadata value, as JSON has it.
    enum Value: Decodable {
        case string(String)
        case int(Int)
        case double(Double)
        case word(String)
        case array([Value])
        case object([String: Value])

        init(from decoder: any Decoder) throws {
            let c = try decoder.singleValueContainer()
            if c.decodeNil() { self = .word("null") }
            else if let b = try? c.decode(Bool.self) { self = .word(b ? "true" : "false") }
            else if let i = try? c.decode(Int.self) { self = .int(i) }
            else if let d = try? c.decode(Double.self) { self = .double(d) }
            else if let s = try? c.decode(String.self) { self = .string(s) }
            else if let a = try? c.decode([Value].self) { self = .array(a) }
            else { self = .object(try c.decode([String: Value].self)) }
        }

        /// The value as swift-log carries it (strings as `LogText` shows them).
        var logged: Logger.Metadata.Value {
            switch self {
            case .string(let s): .string(LogText.shown(s))
            case .word(let s): .string(s)
            case .int(let i): .stringConvertible(i)
            case .double(let d): .stringConvertible(d)
            case .array(let items): .array(items.map(\.logged))
            case .object(let members): .dictionary(PluginLogLine.logged(members))
            }
        }
    }
}
