import PluginProtocol

/// A manifest's bytes before they are decoded: strict JSON (RFC 8259), UTF-8, no BOM, no key twice
/// in one object; and the names a decoder's complaints are given (the field, the line and column).
extension Manifest {
    /// Why `bytes` is not one strict JSON object (or has a key twice in one object), with its line
    /// and column (1-based), or nil.
    package static func strictJSONProblem(_ bytes: [UInt8]) -> String? {
        let failure: JSONScanner.Failure? = bytes.withUnsafeBytes { raw in
            var scanner = JSONScanner(raw, maxDepth: 64)
            do throws(JSONScanner.Failure) {
                try scanner.scanObject { _, _ in }
                return nil
            } catch {
                return error
            }
        }
        func place(_ offset: Int) -> String { lineAndColumn(offset, in: bytes) }
        if bytes.starts(with: [0xEF, 0xBB, 0xBF]) {
            return "not valid JSON: it starts with a byte order mark (BOM); save it as UTF-8 without one"
        }
        guard let failure else {
            if let bad = firstInvalidUTF8(bytes) { return "not valid JSON at \(place(bad)): bytes that are not UTF-8" }
            return DuplicateKeys.first(in: bytes).map { "\(DuplicateKeys.describe($0)) (\(place($0.offset)))" }
        }
        func found(_ offset: Int) -> String {
            guard offset < bytes.count else { return "the end of the file" }
            let c = bytes[offset]
            return c >= 0x20 && c < 0x7F ? "'\(Character(Unicode.Scalar(c)))'" : "byte 0x" + String(c, radix: 16, uppercase: true)
        }

        switch failure {
        case .notAnObject: return "not valid JSON: the file must hold one JSON object ({...})"
        case .truncated: return "not valid JSON: it ends early (\(place(bytes.count))): a missing '}', ']' or '\"'?"
        case .tooDeep(let limit): return "not valid JSON: nested deeper than \(limit) levels"
        case .trailingData(let offset): return "not valid JSON at \(place(offset)): \(found(offset)) after the end of the object"
        case .unexpected(let offset):
            // The commonest slip in a hand-written manifest: a comma before '}' or ']'.
            var hint = ""
            if offset < bytes.count, bytes[offset] == UInt8(ascii: "}") || bytes[offset] == UInt8(ascii: "]") {
                var i = offset - 1
                while i >= 0, [0x20, 0x09, 0x0A, 0x0D].contains(bytes[i]) { i -= 1 }
                if i >= 0, bytes[i] == UInt8(ascii: ",") { hint = " (a trailing comma before it: JSON allows none)" }
            }
            return "not valid JSON at \(place(offset)): unexpected \(found(offset))\(hint)"
        }
    }

    /// A JSON number with a fraction or an exponent, or with more digits than 64 bits hold.
    static func isNotAWholeNumber(_ raw: UnsafeRawBufferPointer) -> Bool {
        guard let first = raw.first, first == UInt8(ascii: "-") || (0x30...0x39).contains(first) else { return false }
        return raw.contains { $0 == UInt8(ascii: ".") || $0 == UInt8(ascii: "e") || $0 == UInt8(ascii: "E") } || raw.count > 19
    }

    /// Where the first byte that is not part of valid UTF-8 is, or nil.
    static func firstInvalidUTF8(_ bytes: [UInt8]) -> Int? {
        var i = 0
        while i < bytes.count {
            let b = bytes[i]
            let length: Int
            switch b {
            case 0x00...0x7F: i += 1; continue
            case 0xC2...0xDF: length = 2
            case 0xE0...0xEF: length = 3
            case 0xF0...0xF4: length = 4
            default: return i
            }
            guard i + length <= bytes.count else { return i }
            for k in 1..<length where bytes[i + k] & 0xC0 != 0x80 { return i }
            // Overlong forms, surrogates and code points past U+10FFFF.
            let second = bytes[i + 1]
            if (b == 0xE0 && second < 0xA0) || (b == 0xED && second > 0x9F) || (b == 0xF0 && second < 0x90) || (b == 0xF4 && second > 0x8F) { return i }
            i += length
        }
        return nil
    }

    /// A decoder's path as a field's name: `limits.memoryMB`, `dependencies[0].version`.
    public static func fieldPath(_ path: [any CodingKey]) -> String {
        path.reduce(into: "") { out, key in
            if let index = key.intValue { out += "[\(index)]" } else { out += (out.isEmpty ? "" : ".") + key.stringValue }
        }
    }
}
