#if canImport(Glibc)
import Glibc
#endif
import Logging
import PluginProtocol
import SupervisorCore
import Synchronization

/// `start --log-format json` (SPEC §10): one JSON object a line on stderr, for a log collector.
/// Members: `time` (RFC 3339, UTC, microseconds), `level`, `message`, then the metadata flattened
/// (`plugin` where there is one; nested dictionaries as `outer.inner`; a key that would shadow one of
/// the first three gets a `metadata.` prefix). A plugin's stderr lines arrive with their `plugin`.
public struct JSONLogHandler: LogHandler {
    public var logLevel: Logger.Level = .info
    public var metadata: Logger.Metadata = [:]
    public var metadataProvider: Logger.MetadataProvider?
    /// Whole lines, in order, written off the thread that logs (`LogWriter`): lines from two
    /// threads never interleave, and a reader that stops reading holds nobody.
    private let writer: LogWriter

    public init(label: String, writer: LogWriter = .json) {
        self.writer = writer
    }

    public subscript(metadataKey key: String) -> Logger.Metadata.Value? {
        get { metadata[key] }
        set { metadata[key] = newValue }
    }

    public func log(event: LogEvent) {
        var merged = metadata
        if let provided = metadataProvider?.get() { merged.merge(provided) { _, new in new } }
        if let extra = event.metadata { merged.merge(extra) { _, new in new } }
        var line = Self.line(time: Self.now(), level: event.level, message: "\(event.message)", metadata: merged)
        line.append(UInt8(ascii: "\n"))
        writer.write(line)
    }

    /// One log line's JSON object (without the newline).
    static func line(time: String, level: Logger.Level, message: String, metadata: Logger.Metadata) -> [UInt8] {
        var out: [UInt8] = []
        out.reserveCapacity(128 + message.utf8.count)
        out.append(contentsOf: #"{"time":"#.utf8)
        out.append(contentsOf: JSONEscaping.quoted(time))
        out.append(contentsOf: #","level":"#.utf8)
        out.append(contentsOf: JSONEscaping.quoted(level.rawValue))
        out.append(contentsOf: #","message":"#.utf8)
        out.append(contentsOf: JSONEscaping.quoted(message))
        var flat: [(key: String, flattened: Bool, value: Logger.Metadata.Value)] = []
        flatten(metadata, prefix: "", into: &flat)
        // Each key once, sorted as written: a name made by flattening or by the prefix that keeps
        // the first three free gives way to the same name given as it is (`a.b` beside `{"a":{"b":..}}`).
        let named = flat.map { entry -> (name: String, made: Bool, value: Logger.Metadata.Value) in
            let reserved = ["time", "level", "message"].contains(entry.key)
            return (reserved ? "metadata." + entry.key : entry.key, reserved || entry.flattened, entry.value)
        }.sorted { ($0.name, $0.made ? 1 : 0) < ($1.name, $1.made ? 1 : 0) }
        var last: String?
        for entry in named where entry.name != last {
            last = entry.name
            out.append(UInt8(ascii: ","))
            out.append(contentsOf: JSONEscaping.quoted(entry.name))
            out.append(UInt8(ascii: ":"))
            append(entry.value, to: &out)
        }
        out.append(UInt8(ascii: "}"))
        return out
    }

    private static func flatten(_ metadata: Logger.Metadata, prefix: String, into out: inout [(key: String, flattened: Bool, value: Logger.Metadata.Value)]) {
        for (key, value) in metadata {
            if case .dictionary(let inner) = value {
                flatten(inner, prefix: prefix + key + ".", into: &out)
            } else {
                out.append((prefix + key, !prefix.isEmpty, value))
            }
        }
    }

    private static func append(_ value: Logger.Metadata.Value, to out: inout [UInt8]) {
        switch value {
        case .string(let s): out.append(contentsOf: JSONEscaping.quoted(s))
        case .stringConvertible(let c):
            // A number logged as one stays a JSON number (`duration_ms`); anything else is its text.
            if let number = c as? Double, number.isFinite {
                out.append(contentsOf: "\(number)".utf8)
            } else if let number = c as? Int {
                out.append(contentsOf: "\(number)".utf8)
            } else {
                out.append(contentsOf: JSONEscaping.quoted(c.description))
            }
        case .array(let items):
            out.append(UInt8(ascii: "["))
            for (i, item) in items.enumerated() {
                if i > 0 { out.append(UInt8(ascii: ",")) }
                append(item, to: &out)
            }
            out.append(UInt8(ascii: "]"))
        case .dictionary(let inner):
            // Only inside arrays: top-level dictionaries are flattened.
            out.append(UInt8(ascii: "{"))
            for (i, (key, item)) in inner.sorted(by: { $0.key < $1.key }).enumerated() {
                if i > 0 { out.append(UInt8(ascii: ",")) }
                out.append(contentsOf: JSONEscaping.quoted(key))
                out.append(UInt8(ascii: ":"))
                append(item, to: &out)
            }
            out.append(UInt8(ascii: "}"))
        }
    }

    /// Now as `2026-11-23T14:48:33.123456Z`.
    static func now() -> String {
        var ts = timespec()
        clock_gettime(CLOCK_REALTIME, &ts)
        var seconds = ts.tv_sec
        var parts = tm()
        gmtime_r(&seconds, &parts)
        func pad(_ n: Int32, _ width: Int) -> String {
            let s = String(n)
            return String(repeating: "0", count: max(0, width - s.count)) + s
        }
        return "\(pad(parts.tm_year + 1900, 4))-\(pad(parts.tm_mon + 1, 2))-\(pad(parts.tm_mday, 2))T"
            + "\(pad(parts.tm_hour, 2)):\(pad(parts.tm_min, 2)):\(pad(parts.tm_sec, 2)).\(pad(Int32(ts.tv_nsec / 1000), 6))Z"
    }
}
