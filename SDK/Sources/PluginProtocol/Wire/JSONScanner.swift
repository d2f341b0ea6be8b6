/// A validating, non-allocating scanner for one JSON document whose top level is an object.
///
/// The supervisor routes messages without decoding their payloads: it needs the top-level members'
/// keys and the byte ranges of their values, and a guarantee that the whole frame is well-formed JSON
/// within a nesting limit. Strings are checked for control characters and bad escapes; numbers and
/// literals for their grammar.
public struct JSONScanner {
    public enum Failure: Error, Equatable, CustomStringConvertible, Sendable {
        case notAnObject
        case unexpected(offset: Int)
        case truncated
        case tooDeep(limit: Int)
        case trailingData(offset: Int)

        public var description: String {
            switch self {
            case .notAnObject: return "message is not a JSON object"
            case .unexpected(let offset): return "invalid JSON at byte \(offset)"
            case .truncated: return "JSON ends early"
            case .tooDeep(let limit): return "JSON nested deeper than \(limit) levels"
            case .trailingData(let offset): return "data after the JSON object at byte \(offset)"
            }
        }
    }

    @usableFromInline let bytes: UnsafeRawBufferPointer
    @usableFromInline var index: Int = 0
    @usableFromInline let maxDepth: Int

    @inlinable
    public init(_ bytes: UnsafeRawBufferPointer, maxDepth: Int = Frame.defaultMaxDepth) {
        self.bytes = bytes
        self.maxDepth = maxDepth
    }

    /// Scans the whole document, calling `member` for each top-level key with the range of its key's
    /// raw bytes (without quotes) and of its value.
    @inlinable
    public mutating func scanObject(_ member: (_ key: Range<Int>, _ value: Range<Int>) throws(Failure) -> Void) throws(Failure) {
        skipSpace()
        guard index < bytes.count, bytes[index] == UInt8(ascii: "{") else { throw .notAnObject }
        index += 1
        skipSpace()
        if peek() == UInt8(ascii: "}") {
            index += 1
        } else {
            while true {
                skipSpace()
                guard peek() == UInt8(ascii: "\"") else { throw unexpectedOrTruncated() }
                let keyStart = index + 1
                try skipString()
                let key = keyStart..<(index - 1)
                skipSpace()
                guard peek() == UInt8(ascii: ":") else { throw unexpectedOrTruncated() }
                index += 1
                skipSpace()
                let valueStart = index
                try skipValue(depth: 1)
                try member(key, valueStart..<index)
                skipSpace()
                let c = peek()
                if c == UInt8(ascii: ",") { index += 1; continue }
                if c == UInt8(ascii: "}") { index += 1; break }
                throw unexpectedOrTruncated()
            }
        }
        skipSpace()
        // Bytes attached inline (docs/protocol.md "Bytes") follow the object after one NUL, which
        // JSON text cannot hold: where they start is `tailStart`.
        if index < bytes.count, bytes[index] == 0 {
            tailStart = index + 1
            return
        }
        if index != bytes.count { throw .trailingData(offset: index) }
    }

    /// After `scanObject`: where the bytes after the object's NUL start, if it had one.
    public var tailStart: Int?

    /// Scans a whole document whose top level is an array, calling `element` with the range of each
    /// of its values.
    public mutating func scanArray(_ element: (_ value: Range<Int>) throws(Failure) -> Void) throws(Failure) {
        skipSpace()
        guard index < bytes.count, bytes[index] == UInt8(ascii: "[") else { throw unexpectedOrTruncated() }
        index += 1
        skipSpace()
        if peek() == UInt8(ascii: "]") {
            index += 1
        } else {
            while true {
                skipSpace()
                let valueStart = index
                try skipValue(depth: 1)
                try element(valueStart..<index)
                skipSpace()
                let c = peek()
                if c == UInt8(ascii: ",") { index += 1; continue }
                if c == UInt8(ascii: "]") { index += 1; break }
                throw unexpectedOrTruncated()
            }
        }
        skipSpace()
        if index != bytes.count { throw .trailingData(offset: index) }
    }

    /// Validates one complete JSON value (any type) filling the whole buffer.
    @inlinable
    public mutating func validateValue() throws(Failure) {
        skipSpace()
        try skipValue(depth: 0)
        skipSpace()
        if index != bytes.count { throw .trailingData(offset: index) }
    }

    @inlinable
    func peek() -> UInt8? { index < bytes.count ? bytes[index] : nil }

    @inlinable
    func unexpectedOrTruncated() -> Failure { index >= bytes.count ? .truncated : .unexpected(offset: index) }

    @inlinable
    mutating func skipSpace() {
        while index < bytes.count {
            switch bytes[index] {
            case 0x20, 0x09, 0x0A, 0x0D: index += 1
            default: return
            }
        }
    }

    @inlinable
    mutating func skipValue(depth: Int) throws(Failure) {
        guard let c = peek() else { throw .truncated }
        switch c {
        case UInt8(ascii: "\""): try skipString()
        case UInt8(ascii: "{"):
            guard depth < maxDepth else { throw .tooDeep(limit: maxDepth) }
            index += 1
            skipSpace()
            if peek() == UInt8(ascii: "}") { index += 1; return }
            while true {
                skipSpace()
                guard peek() == UInt8(ascii: "\"") else { throw unexpectedOrTruncated() }
                try skipString()
                skipSpace()
                guard peek() == UInt8(ascii: ":") else { throw unexpectedOrTruncated() }
                index += 1
                skipSpace()
                try skipValue(depth: depth + 1)
                skipSpace()
                let n = peek()
                if n == UInt8(ascii: ",") { index += 1; continue }
                if n == UInt8(ascii: "}") { index += 1; return }
                throw unexpectedOrTruncated()
            }
        case UInt8(ascii: "["):
            guard depth < maxDepth else { throw .tooDeep(limit: maxDepth) }
            index += 1
            skipSpace()
            if peek() == UInt8(ascii: "]") { index += 1; return }
            while true {
                skipSpace()
                try skipValue(depth: depth + 1)
                skipSpace()
                let n = peek()
                if n == UInt8(ascii: ",") { index += 1; continue }
                if n == UInt8(ascii: "]") { index += 1; return }
                throw unexpectedOrTruncated()
            }
        case UInt8(ascii: "t"): try skipLiteral("true")
        case UInt8(ascii: "f"): try skipLiteral("false")
        case UInt8(ascii: "n"): try skipLiteral("null")
        case UInt8(ascii: "-"), UInt8(ascii: "0")...UInt8(ascii: "9"): try skipNumber()
        default: throw .unexpected(offset: index)
        }
    }

    @inlinable
    mutating func skipLiteral(_ word: StaticString) throws(Failure) {
        let n = word.utf8CodeUnitCount
        guard index + n <= bytes.count else { throw .truncated }
        let w = word.utf8Start
        for i in 0..<n where bytes[index + i] != w[i] { throw .unexpected(offset: index + i) }
        index += n
    }

    @inlinable
    mutating func skipDigits() -> Int {
        let start = index
        var i = index
        while i < bytes.count, bytes[i] &- 0x30 <= 9 { i += 1 }
        index = i
        return i - start
    }

    @inlinable
    mutating func skipNumber() throws(Failure) {
        if peek() == UInt8(ascii: "-") { index += 1 }
        guard let first = peek() else { throw .truncated }
        if first == UInt8(ascii: "0") {
            index += 1
        } else if skipDigits() == 0 {
            throw .unexpected(offset: index)
        }
        if peek() == UInt8(ascii: ".") {
            index += 1
            if skipDigits() == 0 { throw unexpectedOrTruncated() }
        }
        if let e = peek(), e == UInt8(ascii: "e") || e == UInt8(ascii: "E") {
            index += 1
            if let s = peek(), s == UInt8(ascii: "+") || s == UInt8(ascii: "-") { index += 1 }
            if skipDigits() == 0 { throw unexpectedOrTruncated() }
        }
    }

    /// The offset of the first byte of `bytes[start...]` that a JSON string cannot hold as it is
    /// (a quote, a backslash, a control character), else `bytes.count`. Eight bytes at a time, in
    /// a word (SWAR: a byte below 0x20, or one equal to 0x22 or 0x5C, sets its high bit in the
    /// mask): a stream's 64 KiB string element is scanned by every peer it passes (the profile of
    /// supervisor-bench's streams section had the byte-at-a-time loop at a third of the
    /// supervisor's CPU; Swift's SIMD16 took ten times longer than that loop).
    @inlinable
    public static func firstSpecial(_ bytes: UnsafeRawBufferPointer, from start: Int) -> Int {
        var i = start
        let n = bytes.count
        if let base = bytes.baseAddress {
            let ones: UInt64 = 0x0101_0101_0101_0101, highs: UInt64 = 0x8080_8080_8080_8080
            while i + 8 <= n {
                let x = base.loadUnaligned(fromByteOffset: i, as: UInt64.self)
                let quote = x ^ (ones &* 0x22), backslash = x ^ (ones &* 0x5C)
                let below = (x &- ones &* 0x20) & ~x
                let isQuote = (quote &- ones) & ~quote, isBackslash = (backslash &- ones) & ~backslash
                if (below | isQuote | isBackslash) & highs != 0 { break }
                i += 8
            }
        }
        while i < n {
            let c = bytes[i]
            if c == 0x22 || c == 0x5C || c < 0x20 { return i }
            i += 1
        }
        return n
    }

    /// Skips a string starting at its opening quote; leaves `index` after the closing quote.
    @inlinable
    mutating func skipString() throws(Failure) {
        index += 1
        // Most strings here are short (keys, names): their bytes one by one, in a register, before
        // the word-at-a-time scan for a longer rest.
        var i = index
        let end = Swift.min(bytes.count, i + 16)
        while i < end {
            let c = bytes[i]
            if c == UInt8(ascii: "\"") { index = i + 1; return }
            if c == 0x5C || c < 0x20 { break }
            i += 1
        }
        index = i
        while index < bytes.count {
            index = JSONScanner.firstSpecial(bytes, from: index)
            guard index < bytes.count else { break }
            let c = bytes[index]
            if c == UInt8(ascii: "\"") { index += 1; return }
            if c < 0x20 { throw .unexpected(offset: index) }
            if c == UInt8(ascii: "\\") {
                index += 1
                guard let e = peek() else { throw .truncated }
                switch e {
                case UInt8(ascii: "\""), UInt8(ascii: "\\"), UInt8(ascii: "/"), UInt8(ascii: "b"),
                     UInt8(ascii: "f"), UInt8(ascii: "n"), UInt8(ascii: "r"), UInt8(ascii: "t"):
                    index += 1
                case UInt8(ascii: "u"):
                    guard index + 4 < bytes.count else { throw .truncated }
                    for i in 1...4 where JSONScanner.hexValue(bytes[index + i]) == nil {
                        throw .unexpected(offset: index + i)
                    }
                    index += 5
                default: throw .unexpected(offset: index)
                }
                continue
            }
            index += 1
        }
        throw .truncated
    }

    @inlinable
    static func hexValue(_ c: UInt8) -> UInt32? {
        switch c {
        case 0x30...0x39: return UInt32(c - 0x30)
        case 0x41...0x46: return UInt32(c - 0x41 + 10)
        case 0x61...0x66: return UInt32(c - 0x61 + 10)
        default: return nil
        }
    }

    /// Decodes the JSON string whose raw bytes (including quotes) are `range` of `bytes`.
    /// The range must have been validated by the scanner. Returns nil if it is not a string.
    public static func decodeString(_ bytes: UnsafeRawBufferPointer, _ range: Range<Int>) -> String? {
        guard range.count >= 2, bytes[range.lowerBound] == UInt8(ascii: "\""),
              bytes[range.upperBound - 1] == UInt8(ascii: "\"") else { return nil }
        let inner = UnsafeRawBufferPointer(rebasing: bytes[(range.lowerBound + 1)..<(range.upperBound - 1)])
        if !inner.contains(UInt8(ascii: "\\")) {
            return String(decoding: inner, as: UTF8.self)
        }
        var out: [UInt8] = []
        out.reserveCapacity(inner.count)
        var i = 0
        while i < inner.count {
            let c = inner[i]
            guard c == UInt8(ascii: "\\"), i + 1 < inner.count else { out.append(c); i += 1; continue }
            let e = inner[i + 1]
            i += 2
            switch e {
            case UInt8(ascii: "b"): out.append(0x08)
            case UInt8(ascii: "f"): out.append(0x0C)
            case UInt8(ascii: "n"): out.append(0x0A)
            case UInt8(ascii: "r"): out.append(0x0D)
            case UInt8(ascii: "t"): out.append(0x09)
            case UInt8(ascii: "u"):
                guard i + 4 <= inner.count else { return nil }
                var scalar: UInt32 = 0
                for k in 0..<4 { scalar = scalar << 4 | (hexValue(inner[i + k]) ?? 0) }
                i += 4
                if (0xD800...0xDBFF).contains(scalar), i + 6 <= inner.count,
                   inner[i] == UInt8(ascii: "\\"), inner[i + 1] == UInt8(ascii: "u") {
                    var low: UInt32 = 0
                    for k in 0..<4 { low = low << 4 | (hexValue(inner[i + 2 + k]) ?? 0) }
                    if (0xDC00...0xDFFF).contains(low) {
                        scalar = 0x10000 + ((scalar - 0xD800) << 10) + (low - 0xDC00)
                        i += 6
                    }
                }
                let s = Unicode.Scalar(scalar) ?? "\u{FFFD}"
                out.append(contentsOf: Array(String(Character(s)).utf8))
            default: out.append(e)
            }
        }
        return String(decoding: out, as: UTF8.self)
    }

    /// Parses an unsigned integer value (no sign, fraction or exponent) from `range`.
    public static func decodeUInt(_ bytes: UnsafeRawBufferPointer, _ range: Range<Int>) -> UInt64? {
        guard !range.isEmpty, range.count <= 20 else { return nil }
        var value: UInt64 = 0
        // Up to 19 digits cannot overflow (UInt64.max has 20): no checks per digit (ids are 19).
        if range.count <= 19 {
            for i in range {
                let d = bytes[i] &- 0x30
                guard d <= 9 else { return nil }
                value = value &* 10 &+ UInt64(d)
            }
            return value
        }
        for i in range {
            let c = bytes[i]
            guard c >= 0x30, c <= 0x39 else { return nil }
            let (m, o1) = value.multipliedReportingOverflow(by: 10)
            let (a, o2) = m.addingReportingOverflow(UInt64(c - 0x30))
            if o1 || o2 { return nil }
            value = a
        }
        return value
    }
}
