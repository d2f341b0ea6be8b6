import PluginProtocol

/// Where a manifest's fault is (SPEC §6: a manifest error names its file, line and column): a
/// field's value found again in the file's bytes by the path an error names it by.
extension Manifest {
    /// Where `field` (`version`, `limits.memoryMB`, `dependencies[0].id`) stands in `bytes`:
    /// `line L, column C` of its value or, for a member that is not there, of the object that lacks
    /// it (`in the object at line L, column C`). Nil when the bytes do not hold that path's parents.
    static func place(of field: String, in bytes: [UInt8]) -> String? {
        enum Step { case key([UInt8]), index(Int) }
        var steps: [Step] = []
        for part in field.split(separator: ".", omittingEmptySubsequences: false) {
            let pieces = part.split(separator: "[", omittingEmptySubsequences: false)
            if !pieces[0].isEmpty { steps.append(.key(Array(pieces[0].utf8))) }
            for piece in pieces.dropFirst() {
                guard piece.hasSuffix("]"), let i = Int(piece.dropLast()) else { return nil }
                steps.append(.index(i))
            }
        }
        let start = bytes.firstIndex { ![0x20, 0x09, 0x0A, 0x0D].contains($0) } ?? 0
        var value = start..<bytes.count
        for step in steps {
            var found: Range<Int>?
            let scanned: Bool = bytes.withUnsafeBytes { raw in
                var scanner = JSONScanner(UnsafeRawBufferPointer(rebasing: raw[value]))
                let base = value.lowerBound
                do throws(JSONScanner.Failure) {
                    switch step {
                    case .key(let name):
                        try scanner.scanObject { key, member in
                            if found == nil, raw[(base + key.lowerBound)..<(base + key.upperBound)].elementsEqual(name) {
                                found = (base + member.lowerBound)..<(base + member.upperBound)
                            }
                        }
                    case .index(let wanted):
                        var i = 0
                        try scanner.scanArray { element in
                            if i == wanted { found = (base + element.lowerBound)..<(base + element.upperBound) }
                            i += 1
                        }
                    }
                    return true
                } catch {
                    return false
                }
            }
            guard scanned else { return nil }
            guard let found else { return "in the object at " + lineAndColumn(value.lowerBound, in: bytes) }
            value = found
        }
        return lineAndColumn(value.lowerBound, in: bytes)
    }

    /// `line L, column C` (1-based) of the byte at `offset`.
    static func lineAndColumn(_ offset: Int, in bytes: [UInt8]) -> String {
        let before = bytes.prefix(min(offset, bytes.count))
        let line = before.reduce(1) { $0 + ($1 == UInt8(ascii: "\n") ? 1 : 0) }
        let column = offset - (before.lastIndex(of: UInt8(ascii: "\n")).map { $0 + 1 } ?? 0) + 1
        return "line \(line), column \(column)"
    }
}
