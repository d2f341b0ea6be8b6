/// Builds one length-prefixed frame by appending JSON members, so a router can forward raw payload
/// bytes it never decoded. Call `finish()` to patch the length and take the bytes.
public struct FrameBuilder: Sendable {
    public private(set) var bytes: [UInt8]
    private var first = true

    /// Starts a frame holding `{"type":"<kind>"`.
    public init(kind: MessageKind, capacity: Int = 128) {
        bytes = []
        bytes.reserveCapacity(capacity + 32)
        bytes.append(contentsOf: [0, 0, 0, 0])
        bytes.append(UInt8(ascii: "{"))
        appendKey("type")
        appendString(kind.rawValue)
    }

    private mutating func appendKey(_ key: StaticString) {
        if first { first = false } else { bytes.append(UInt8(ascii: ",")) }
        bytes.append(UInt8(ascii: "\""))
        bytes.append(contentsOf: UnsafeBufferPointer(start: key.utf8Start, count: key.utf8CodeUnitCount))
        bytes.append(UInt8(ascii: "\""))
        bytes.append(UInt8(ascii: ":"))
    }

    public mutating func uint(_ key: StaticString, _ value: UInt64) {
        appendKey(key)
        if value == 0 { bytes.append(UInt8(ascii: "0")); return }
        var digits: (UInt8, UInt8, UInt8, UInt8, UInt8, UInt8, UInt8, UInt8, UInt8, UInt8,
                     UInt8, UInt8, UInt8, UInt8, UInt8, UInt8, UInt8, UInt8, UInt8, UInt8) =
            (0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0)
        var n = value
        var count = 0
        withUnsafeMutableBytes(of: &digits) { d in
            while n > 0 { d[count] = UInt8(n % 10) + 0x30; n /= 10; count += 1 }
            for i in stride(from: count - 1, through: 0, by: -1) { bytes.append(d[i]) }
        }
    }

    public mutating func string(_ key: StaticString, _ value: String) {
        appendKey(key)
        appendString(value)
    }

    /// Appends `"key": <raw>` where `raw` is already-valid JSON.
    public mutating func raw(_ key: StaticString, _ raw: UnsafeRawBufferPointer) {
        appendKey(key)
        bytes.append(contentsOf: raw)
    }

    public mutating func raw(_ key: StaticString, _ raw: [UInt8]) {
        appendKey(key)
        bytes.append(contentsOf: raw)
    }

    /// Appends `"error": {"code": ..., "message": ...}`.
    public mutating func error(_ code: ErrorCode, _ message: String) {
        error(code: code.rawValue, message)
    }

    /// Appends `"error": {"code": ..., "message": ...}` with a code of the plugin's own.
    public mutating func error(code: String, _ message: String) {
        appendKey("error")
        bytes.append(contentsOf: Array(#"{"code":"#.utf8))
        appendString(code)
        bytes.append(contentsOf: Array(#","message":"#.utf8))
        appendString(message)
        bytes.append(UInt8(ascii: "}"))
    }

    private mutating func appendString(_ s: String) {
        bytes.append(UInt8(ascii: "\""))
        JSONEscaping.append(s, to: &bytes)
        bytes.append(UInt8(ascii: "\""))
    }

    /// Closes the object, writes the length prefix and returns the whole frame.
    public consuming func finish() -> [UInt8] {
        bytes.append(UInt8(ascii: "}"))
        let n = UInt32(bytes.count - Frame.headerSize)
        bytes[0] = UInt8(truncatingIfNeeded: n >> 24)
        bytes[1] = UInt8(truncatingIfNeeded: n >> 16)
        bytes[2] = UInt8(truncatingIfNeeded: n >> 8)
        bytes[3] = UInt8(truncatingIfNeeded: n)
        return bytes
    }
}

/// JSON string escaping.
public enum JSONEscaping {
    public static func append(_ s: String, to bytes: inout [UInt8]) {
        for c in s.utf8 {
            switch c {
            case UInt8(ascii: "\""): bytes.append(UInt8(ascii: "\\")); bytes.append(c)
            case UInt8(ascii: "\\"): bytes.append(UInt8(ascii: "\\")); bytes.append(c)
            case 0x0A: bytes.append(UInt8(ascii: "\\")); bytes.append(UInt8(ascii: "n"))
            case 0x0D: bytes.append(UInt8(ascii: "\\")); bytes.append(UInt8(ascii: "r"))
            case 0x09: bytes.append(UInt8(ascii: "\\")); bytes.append(UInt8(ascii: "t"))
            case 0..<0x20:
                let hex: [UInt8] = Array("0123456789abcdef".utf8)
                bytes.append(contentsOf: [UInt8(ascii: "\\"), UInt8(ascii: "u"), 0x30, 0x30, hex[Int(c >> 4)], hex[Int(c & 0xF)]])
            default: bytes.append(c)
            }
        }
    }

    /// `s` as a quoted JSON string.
    public static func quoted(_ s: String) -> [UInt8] {
        var out: [UInt8] = [UInt8(ascii: "\"")]
        append(s, to: &out)
        out.append(UInt8(ascii: "\""))
        return out
    }
}

extension Array where Element == UInt8 {
    /// Prepends a 4-byte big-endian length to a frame body.
    public static func frame(body: some Collection<UInt8>) -> [UInt8] {
        let n = UInt32(body.count)
        var out: [UInt8] = [UInt8(truncatingIfNeeded: n >> 24), UInt8(truncatingIfNeeded: n >> 16),
                            UInt8(truncatingIfNeeded: n >> 8), UInt8(truncatingIfNeeded: n)]
        out.append(contentsOf: body)
        return out
    }
}
