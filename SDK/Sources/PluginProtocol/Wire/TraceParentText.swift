/// The bytes of a W3C `traceparent` (SPEC §3), read and written without allocating: shared by the
/// supervisor (every call it forwards) and a callee's worker (every call that arrives over a peer
/// link, docs/protocol.md "Peer links"), so both continue a caller's trace the same way.
public enum TraceParentText {
    /// `00-<trace id>-<span id>-<flags>`, the 55 bytes of a `traceparent`.
    public static let length = 55

    /// Reads a caller's `traceparent` from the raw JSON value (quotes included), as the W3C Trace
    /// Context spec reads it: version 00 is exactly 55 bytes; a later version (not ff) may be longer
    /// and its first 55 bytes are read the same way; lowercase hex only; the trace and parent ids
    /// must not be all zeros. Fills `trace` (16 bytes) and `flags`; false for anything else (the
    /// hop then starts a new trace).
    public static func parent(inJSON raw: UnsafeRawBufferPointer, trace: UnsafeMutableRawBufferPointer, flags: inout UInt8) -> Bool {
        let n = raw.count - 2
        guard trace.count == 16, n >= length, raw[0] == UInt8(ascii: "\""), raw[raw.count - 1] == UInt8(ascii: "\"") else { return false }
        let h = UnsafeRawBufferPointer(rebasing: raw[1..<(raw.count - 1)])
        guard let v0 = Hex.nibble(h[0]), let v1 = Hex.nibble(h[1]) else { return false }
        let version = v0 << 4 | v1
        guard version != 0xFF, version == 0 ? n == length : (n == length || h[length] == UInt8(ascii: "-")) else { return false }
        guard h[2] == UInt8(ascii: "-"), h[35] == UInt8(ascii: "-"), h[52] == UInt8(ascii: "-") else { return false }
        var span: UInt64 = 0
        var f: UInt8 = 0
        let ok = Hex.read(h, from: 3, into: trace)
            && withUnsafeMutableBytes(of: &span) { Hex.read(h, from: 36, into: $0) }
            && withUnsafeMutableBytes(of: &f) { Hex.read(h, from: 53, into: $0) }
        guard ok, span != 0, trace.contains(where: { $0 != 0 }) else { return false }
        flags = f
        return true
    }

    /// Writes `"00-<trace>-<span>-<flags>"`, quotes included, into `out` (57 bytes): pointer writes
    /// from a digit table, no bounds checks per byte.
    @inline(__always)
    public static func writeQuoted(trace: UnsafeRawBufferPointer, span: UnsafeRawBufferPointer, flags: UInt8,
                                   into out: UnsafeMutableRawBufferPointer) {
        precondition(out.count >= length + 2 && trace.count == 16 && span.count == 8)
        let p = out.baseAddress!.assumingMemoryBound(to: UInt8.self)
        p[0] = 0x22  // "
        p[1] = 0x30  // 0
        p[2] = 0x30
        p[3] = 0x2D  // -
        Hex.write(trace, to: p + 4)
        p[36] = 0x2D
        Hex.write(span, to: p + 37)
        p[53] = 0x2D
        withUnsafeBytes(of: flags) { Hex.write($0, to: p + 54) }
        p[56] = 0x22
    }
}

/// Lowercase hex, both ways, without allocating.
public enum Hex {
    static let digits: StaticString = "0123456789abcdef"

    /// Two lowercase digits a byte, written at `out`.
    @inline(__always)
    public static func write(_ bytes: UnsafeRawBufferPointer, to out: UnsafeMutablePointer<UInt8>) {
        let d = digits.utf8Start
        for i in 0..<bytes.count {
            out[2 * i] = d[Int(bytes[i] >> 4)]
            out[2 * i + 1] = d[Int(bytes[i] & 0x0F)]
        }
    }

    /// Lowercase only, as the W3C spec requires.
    @inline(__always)
    public static func nibble(_ c: UInt8) -> UInt8? {
        switch c {
        case 0x30...0x39: return c &- 0x30
        case 0x61...0x66: return c &- 0x61 &+ 10
        default: return nil
        }
    }

    /// Reads `out.count` bytes of hex from `text` at `offset` (the caller has checked the length).
    public static func read(_ text: UnsafeRawBufferPointer, from offset: Int, into out: UnsafeMutableRawBufferPointer) -> Bool {
        let t = text.baseAddress!.assumingMemoryBound(to: UInt8.self) + offset
        let o = out.baseAddress!.assumingMemoryBound(to: UInt8.self)
        for i in 0..<out.count {
            guard let hi = nibble(t[2 * i]), let lo = nibble(t[2 * i + 1]) else { return false }
            o[i] = hi << 4 | lo
        }
        return true
    }
}

/// Trace and span ids: SplitMix64 (Steele, Lea and Flood, 2014; the seeding generator of
/// xoshiro) over a seed from the system generator (the kernel's). Ids must be unique, not secret (W3C Trace
/// Context §3.2.2.3), and every forwarded call takes one: a kernel call per id, or even per 512 ids,
/// showed in the call path's profile, this is a multiply and two shifts. Not locked: one owner.
public struct TraceIDGenerator: RandomNumberGenerator {
    private var state: UInt64

    public init() {
        var system = SystemRandomNumberGenerator()  // getrandom(2)
        state = system.next()
    }

    @inline(__always)
    public mutating func next() -> UInt64 {
        state &+= 0x9E37_79B9_7F4A_7C15
        var z = state
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return z ^ (z >> 31)
    }
}
