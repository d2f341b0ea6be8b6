import PluginProtocol

/// A key written twice in one JSON object of a hand-edited file (a manifest, the config file, a
/// catalog): a decoder keeps one of the two values without a word, so the file says something
/// other than what its reader believes. Found here, named with its place.
public enum DuplicateKeys {
    public struct Found: Equatable, Sendable {
        /// The key, and the object it is in as a path (`limits`, `dependencies[1]`; "" at the top).
        public var key: String
        public var object: String
        /// Where its second appearance starts (the key's opening quote).
        public var offset: Int
    }

    /// The first key that stands twice in one object of `bytes`, which the caller has checked to be
    /// valid JSON; nil when there is none (or the bytes are not valid JSON after all).
    public static func first(in bytes: [UInt8]) -> Found? {
        bytes.withUnsafeBytes { raw in
            var found: Found?
            walk(raw, 0..<raw.count, path: "", found: &found, scalar: { _, _ in nil })
            return found
        }
    }

    /// The first scalar value (a number, a string, a literal) for which `matches` is true of its
    /// raw bytes, as the path to it (`limits.memoryMB`, `dependencies[1].id`) and where it starts.
    public static func firstScalar(in bytes: [UInt8], where matches: @escaping (UnsafeRawBufferPointer) -> Bool) -> Found? {
        bytes.withUnsafeBytes { raw in
            var found: Found?
            walk(raw, 0..<raw.count, path: "", found: &found) { path, range in
                matches(UnsafeRawBufferPointer(rebasing: raw[range])) ? Found(key: path, object: path, offset: range.lowerBound) : nil
            }
            return found
        }
    }

    /// A sentence for an error message: `key 'x' appears twice in 'limits'`.
    public static func describe(_ found: Found) -> String {
        "key '\(found.key)' appears twice in \(found.object.isEmpty ? "the top-level object" : "'\(found.object)'"): JSON keeps only one of them"
    }

    private static func walk(_ raw: UnsafeRawBufferPointer, _ range: Range<Int>, path: String, found: inout Found?,
                             scalar: (String, Range<Int>) -> Found?) {
        guard found == nil, let first = range.first(where: { !isSpace(raw[$0]) }) else { return }
        let part = UnsafeRawBufferPointer(rebasing: raw[range])
        var scanner = JSONScanner(part, maxDepth: 512)
        switch raw[first] {
        case UInt8(ascii: "{"):
            var seen = Set<String>()
            try? scanner.scanObject { key, value throws(JSONScanner.Failure) in
                let quoted = (key.lowerBound - 1)..<(key.upperBound + 1)
                let name = JSONScanner.decodeString(part, quoted) ?? ""
                guard found == nil else { return }
                guard seen.insert(name).inserted else {
                    found = Found(key: name, object: path, offset: range.lowerBound + quoted.lowerBound)
                    return
                }
                walk(raw, (range.lowerBound + value.lowerBound)..<(range.lowerBound + value.upperBound),
                     path: path.isEmpty ? name : path + "." + name, found: &found, scalar: scalar)
            }
        case UInt8(ascii: "["):
            var index = 0
            try? scanner.scanArray { value throws(JSONScanner.Failure) in
                walk(raw, (range.lowerBound + value.lowerBound)..<(range.lowerBound + value.upperBound),
                     path: path + "[\(index)]", found: &found, scalar: scalar)
                index += 1
            }
        default:
            let end = range.upperBound
            var last = end
            while last > first, isSpace(raw[last - 1]) { last -= 1 }
            found = scalar(path, first..<last)
        }
    }

    private static func isSpace(_ c: UInt8) -> Bool { c == 0x20 || c == 0x09 || c == 0x0A || c == 0x0D }
}
