import Logging

/// A plugin's text as the supervisor's log carries it: a `log` message, its metadata's keys and
/// strings, a line of its stdout or stderr. Control characters (a carriage return or a newline
/// that would start a line of its own, a terminal's escape sequences) are written as escapes, and
/// at most `limit` bytes are kept (the rest is cut, and said so): a plugin's text cannot forge a
/// line, nor reach the terminal the log is read on. A tab stays a tab.
public enum LogText {
    /// As a line of a worker's output (`OutputCapture.lineLimit`).
    static let limit = OutputCapture.lineLimit

    /// `text` with its control characters (but a tab) written as escapes, uncut: for a terminal
    /// (the CLI's tables and event lines).
    public static func escaped(_ text: String) -> String { shown(text, limit: .max) }

    static func shown(_ text: String, limit: Int = limit) -> String {
        // Most text has nothing to escape and fits: as it is.
        if text.utf8.count <= limit, !text.unicodeScalars.contains(where: needsEscape) { return text }
        var out = ""
        var bytes = 0
        for scalar in text.unicodeScalars {
            let piece: String
            switch scalar.value {
            case 0x0A: piece = "\\n"
            case 0x0D: piece = "\\r"
            case 0x09: piece = "\t"
            case 0x00..<0x20, 0x7F..<0xA0: piece = "\\u{" + String(scalar.value, radix: 16) + "}"
            default: piece = String(scalar)
            }
            bytes += piece.utf8.count
            guard bytes <= limit else { return out + "… (\(text.utf8.count) bytes, cut)" }
            out += piece
        }
        return out
    }

    private static func needsEscape(_ scalar: Unicode.Scalar) -> Bool {
        scalar.value != 0x09 && (scalar.value < 0x20 || (0x7F..<0xA0).contains(scalar.value))
    }

    /// Metadata with each string escaped the same way.
    static func shown(_ value: Logger.Metadata.Value, limit: Int) -> Logger.Metadata.Value {
        switch value {
        case .string(let text): .string(shown(text, limit: limit))
        case .stringConvertible(let convertible): .string(shown(convertible.description, limit: limit))
        case .array(let values): .array(values.map { shown($0, limit: limit) })
        case .dictionary(let values): .dictionary(values.reduce(into: [:]) { $0[shown($1.key, limit: limit)] = shown($1.value, limit: limit) })
        }
    }
}

/// The supervisor's text log (`start`, the default format): swift-log's `StreamLogHandler` on
/// stderr (through `LogWriter`, off the thread that logs), with every message and metadata string escaped as `LogText` does a plugin's. Text from
/// outside reaches the log in many places (a control client's request type, an install's URI, an
/// upgrade's binary path, a manifest's identifier, a folder's name): none can forge a line of its
/// own or send escapes to the terminal the log is read on. (`--log-format json` escapes by JSON.)
public struct TextLogHandler: LogHandler {
    private var inner: StreamLogHandler
    /// Longer than a plugin's line: the supervisor's own messages list plugins.
    static let limit = 1 << 16

    public init(label: String, writer: LogWriter = .text) {
        inner = StreamLogHandler(label: label, stream: LogWriterStream(writer: writer))
    }

    public var logLevel: Logger.Level {
        get { inner.logLevel }
        set { inner.logLevel = newValue }
    }

    public var metadata: Logger.Metadata {
        get { inner.metadata }
        set { inner.metadata = newValue }
    }

    public var metadataProvider: Logger.MetadataProvider? {
        get { inner.metadataProvider }
        set { inner.metadataProvider = newValue }
    }

    public subscript(metadataKey key: String) -> Logger.Metadata.Value? {
        get { inner[metadataKey: key] }
        set { inner[metadataKey: key] = newValue }
    }

    public func log(event: LogEvent) {
        var escaped = event
        escaped.message = "\(LogText.shown(event.message.description, limit: Self.limit))"
        escaped.metadata = event.metadata.map {
            $0.reduce(into: [:]) { $0[Self.key(LogText.shown($1.key, limit: Self.limit))] = Self.quoted(LogText.shown($1.value, limit: Self.limit)) }
        }
        inner.log(event: escaped)
    }

    /// A key as `key=value` can carry it: a character that would end it (a space, `=`, a quote)
    /// becomes `_`.
    static func key(_ text: String) -> String {
        guard text.contains(where: { $0 == " " || $0 == "=" || $0 == "\"" }) else { return text }
        return String(text.map { $0 == " " || $0 == "=" || $0 == "\"" ? "_" : $0 })
    }

    /// A string value that has a space, `=` or a quote, or none at all, in quotes (a quote or a
    /// backslash in it escaped), as logfmt writes it: a value cannot pass for more fields of the
    /// line (`a=1 plugin=other`).
    static func quoted(_ value: Logger.Metadata.Value) -> Logger.Metadata.Value {
        guard case .string(let text) = value else { return value }
        guard text.isEmpty || text.contains(where: { $0 == " " || $0 == "=" || $0 == "\"" }) else { return value }
        var out = "\""
        for c in text {
            if c == "\"" || c == "\\" { out.append("\\") }
            out.append(c)
        }
        return .string(out + "\"")
    }
}
