#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif

/// Fields a manifest does not have are ignored (SPEC §2), so that a newer manifest still loads; but
/// one a letter or a case away from a field it does have is a typo that silently drops a setting
/// (`"callTimeoutMS"`, `"permission"`). Those are said, with the field meant.
extension Manifest {
    /// The fields of each object of a manifest: "" the top level, "limits", "resources",
    /// "variants[]" and "dependencies[]" their elements.
    static let fieldNames: [String: [String]] = [
        "": ["identifier", "version", "dependencies", "library", "variants", "permissions", "restart", "limits",
             "resources", "idempotent", "activation", "idleStopMs"],
        "limits": ["memoryMB", "softMemoryMB", "openFiles", "callTimeoutMs", "cpuPercent", "startupTimeoutMs",
                   "streamIdleTimeoutMs", "retries", "maxPayloadMB"],
        "resources": ["baseURL", "files", "refresh"],
        "variants[]": ["library", "requires"],
        "dependencies[]": ["id", "version"],
    ]

    /// One line for each field of `bytes` (a manifest that parsed) that no manifest has but that is
    /// close to one that it does: `<file>: field 'limits.callTimeoutMS' is not a manifest field and
    /// is ignored; did you mean 'callTimeoutMs'?`.
    static let maxNotes = 10

    static func misspelledFields(_ bytes: [UInt8], file: String) -> [String] {
        guard let shape = try? JSONDecoder().decode(Shape.self, from: Data(bytes)) else { return [] }
        var notes: [String] = []
        func check(_ keys: [String], in object: String, path: (String) -> String) {
            let known = fieldNames[object] ?? []
            for key in keys.sorted() where !known.contains(key) {
                guard let meant = closest(to: key, among: known) else { continue }
                notes.append("\(file): field '\(path(key))' is not a manifest field and is ignored; did you mean '\(meant)'?")
            }
        }
        check(shape.top, in: "") { $0 }
        for (name, keys) in shape.nested.sorted(by: { $0.key < $1.key }) { check(keys, in: name) { "\(name).\($0)" } }
        for (name, elements) in shape.lists.sorted(by: { $0.key < $1.key }) {
            for (i, keys) in elements.enumerated() { check(keys, in: name + "[]") { "\(name)[\(i)].\($0)" } }
        }
        // A few say it; thousands of one typo (a list of 70,000 variants) would flood the log.
        guard notes.count > maxNotes else { return notes }
        return notes.prefix(maxNotes) + ["\(file): \(notes.count - maxNotes) more fields like these are ignored"]
    }

    /// The field `key` probably means: the same but for case, or one (two for a long name) letters
    /// added, dropped, changed or swapped.
    static func closest(to key: String, among known: [String]) -> String? {
        let lower = Array(key.lowercased().utf8)
        var best: (name: String, distance: Int)?
        for name in known {
            let candidate = Array(name.lowercased().utf8)
            let allowed = candidate.count >= 8 ? 2 : 1
            guard abs(candidate.count - lower.count) <= allowed else { continue }
            let d = editDistance(lower, candidate)
            if d <= allowed, d < best?.distance ?? .max { best = (name, d) }
        }
        return best?.name
    }

    /// Letters added, dropped, changed or swapped with the next (optimal string alignment).
    static func editDistance(_ a: [UInt8], _ b: [UInt8]) -> Int {
        guard !a.isEmpty, !b.isEmpty else { return max(a.count, b.count) }
        var d = [[Int]](repeating: [Int](repeating: 0, count: b.count + 1), count: a.count + 1)
        for i in 0...a.count { d[i][0] = i }
        for j in 0...b.count { d[0][j] = j }
        for i in 1...a.count {
            for j in 1...b.count {
                d[i][j] = min(d[i - 1][j] + 1, d[i][j - 1] + 1, d[i - 1][j - 1] + (a[i - 1] == b[j - 1] ? 0 : 1))
                if i > 1, j > 1, a[i - 1] == b[j - 2], a[i - 2] == b[j - 1] { d[i][j] = min(d[i][j], d[i - 2][j - 2] + 1) }
            }
        }
        return d[a.count][b.count]
    }

    /// The field names of a manifest's objects, whatever their values.
    private struct Shape: Decodable {
        var top: [String] = []
        var nested: [String: [String]] = [:]
        var lists: [String: [[String]]] = [:]

        init(from decoder: any Decoder) throws {
            guard let c = try? decoder.container(keyedBy: AnyKey.self) else { return }
            top = c.allKeys.map(\.stringValue)
            for name in ["limits", "resources"] {
                if let keys = try? c.decode(KeysOnly.self, forKey: AnyKey(name)) { nested[name] = keys.keys }
            }
            for name in ["variants", "dependencies"] {
                if let elements = try? c.decode([KeysOnly].self, forKey: AnyKey(name)) { lists[name] = elements.map(\.keys) }
            }
        }
    }

    /// An object's field names; nothing for any other value.
    private struct KeysOnly: Decodable {
        var keys: [String]
        init(from decoder: any Decoder) {
            keys = (try? decoder.container(keyedBy: AnyKey.self))?.allKeys.map(\.stringValue) ?? []
        }
    }

    private struct AnyKey: CodingKey {
        var stringValue: String
        var intValue: Int? { nil }
        init(_ name: String) { stringValue = name }
        init?(stringValue: String) { self.stringValue = stringValue }
        init?(intValue: Int) { nil }
    }
}
