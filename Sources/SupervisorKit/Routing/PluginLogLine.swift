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

    /// The most a message, a metadata key or a string value keeps, in bytes (as a line of its
    /// output: `WorkerOutput.lineLimit`); the rest is cut, and said so. The frame limit is far
    /// larger, and the rate limit counts messages, not bytes.
    static let textLimit = 4096
    /// The most metadata keys a line keeps.
    static let metadataLimit = 64

    /// `text` as a log line may carry it: control characters (a newline that would start a line
    /// of its own, a carriage return, a terminal's escape sequences) written as escapes, and at
    /// most `textLimit` bytes. A plugin's text cannot forge a line, or the terminal it is read on.
    static func shown(_ text: String) -> String {
        var out = ""
        var bytes = 0
        for scalar in text.unicodeScalars {
            let piece: String
            switch scalar.value {
            case 0x0A: piece = "\\n"
            case 0x0D: piece = "\\r"
            case 0x09: piece = "\\t"
            case 0x00..<0x20, 0x7F..<0xA0: piece = "\\u{" + String(scalar.value, radix: 16) + "}"
            default: piece = String(scalar)
            }
            bytes += piece.utf8.count
            guard bytes <= textLimit else { return out + "… (\(text.utf8.count) bytes, cut)" }
            out += piece
        }
        return out
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

        /// The value as swift-log carries it (strings as `shown`).
        var logged: Logger.Metadata.Value {
            switch self {
            case .string(let s): .string(PluginLogLine.shown(s))
            case .word(let s): .string(s)
            case .int(let i): .stringConvertible(i)
            case .double(let d): .stringConvertible(d)
            case .array(let items): .array(items.map(\.logged))
            case .object(let members): .dictionary(Dictionary(members.prefix(PluginLogLine.metadataLimit).map { (PluginLogLine.shown($0.key), $0.value.logged) },
                                                             uniquingKeysWith: { first, _ in first }))
            }
        }
    }
}
