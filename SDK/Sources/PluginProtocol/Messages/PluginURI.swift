/// A `plugin://<identifier>/<path>?<query>` URI, as dispatched by the supervisor (SVPCore's idea).
public struct PluginURI: Sendable, Equatable, CustomStringConvertible {
    public var identifier: String
    public var path: String
    public var query: String?

    /// Parses `text`; nil unless it is `plugin://` followed by a valid identifier.
    public init?(_ text: String) {
        let scheme = "plugin://"
        guard text.hasPrefix(scheme) else { return nil }
        let rest = text.dropFirst(scheme.count)
        let hostEnd = rest.firstIndex(where: { $0 == "/" || $0 == "?" }) ?? rest.endIndex
        let host = String(rest[..<hostEnd])
        guard PluginIdentifier.isValid(host) else { return nil }
        identifier = host
        let tail = rest[hostEnd...]
        if let q = tail.firstIndex(of: "?") {
            path = String(tail[..<q])
            query = String(tail[tail.index(after: q)...])
        } else {
            path = String(tail)
            query = nil
        }
        if path.isEmpty { path = "/" }
    }

    /// The query as `name=value` pairs, percent-decoded (`+` is a space); a repeated name keeps its last value.
    public var queryItems: [String: String] {
        guard let query, !query.isEmpty else { return [:] }
        var out: [String: String] = [:]
        for pair in query.split(separator: "&") {
            let parts = pair.split(separator: "=", maxSplits: 1, omittingEmptySubsequences: false)
            let key = Self.percentDecoded(parts[0])
            out[key] = parts.count > 1 ? Self.percentDecoded(parts[1]) : ""
        }
        return out
    }

    /// Decodes `%XX` escapes and `+`; an invalid escape is kept as it is.
    public static func percentDecoded(_ text: Substring) -> String {
        var out: [UInt8] = []
        let bytes = Array(text.utf8)
        var i = 0
        func hex(_ c: UInt8) -> UInt8? {
            switch c {
            case 0x30...0x39: return c - 0x30
            case 0x41...0x46: return c - 0x37
            case 0x61...0x66: return c - 0x57
            default: return nil
            }
        }
        while i < bytes.count {
            if bytes[i] == UInt8(ascii: "%"), i + 2 < bytes.count, let h = hex(bytes[i + 1]), let l = hex(bytes[i + 2]) {
                out.append(h << 4 | l)
                i += 3
            } else {
                out.append(bytes[i] == UInt8(ascii: "+") ? 0x20 : bytes[i])
                i += 1
            }
        }
        return String(decoding: out, as: UTF8.self)
    }

    public var description: String {
        "plugin://\(identifier)\(path)" + (query.map { "?\($0)" } ?? "")
    }
}

/// Plugin identifiers: reverse-DNS, `[A-Za-z0-9.-]` (SPEC §2).
public enum PluginIdentifier {
    public static func isValid(_ s: String) -> Bool { problem(s) == nil }

    /// Why `s` is not a plugin identifier (1 to 255 of `[A-Za-z0-9.-]`, neither starting nor
    /// ending with `.`), or nil when it is one.
    public static func problem(_ s: String) -> String? {
        if s.isEmpty { return "it is empty" }
        if s.utf8.count > 255 { return "it is \(s.utf8.count) bytes long (255 at most)" }
        if let c = s.unicodeScalars.first(where: { !isAllowed($0) }) {
            return "it has '\(c.isASCII && c.value >= 0x20 && c.value < 0x7F ? String(c) : "U+" + String(c.value, radix: 16, uppercase: true))', not one of [A-Za-z0-9.-]"
        }
        if s.first == "." { return "it starts with '.'" }
        if s.last == "." { return "it ends with '.'" }
        return nil
    }

    private static func isAllowed(_ c: Unicode.Scalar) -> Bool {
        ("0"..."9").contains(c) || ("A"..."Z").contains(c) || ("a"..."z").contains(c) || c == "." || c == "-"
    }
}
