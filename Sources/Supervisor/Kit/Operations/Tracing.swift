#if canImport(Glibc)
import Glibc
#endif
import PluginProtocol
import W3CTraceContext

/// One hop's W3C trace context (SPEC §3): the trace it belongs to, the span id the supervisor gave
/// this hop, and the caller's flags.
struct CallTrace {
    var traceID: TraceID
    var spanID: SpanID
    var flags: TraceFlags

    /// `00-<trace id>-<span id>-<flags>`, the 55 bytes of a `traceparent`.
    static let headerLength = 55

    /// Writes the header, between JSON quotes, into `out` (57 bytes). On every forwarded call:
    /// pointer writes from a digit table, no bounds checks per byte.
    @inline(__always)
    func writeQuotedHeader(_ out: UnsafeMutableRawBufferPointer) {
        precondition(out.count >= Self.headerLength + 2)
        let p = out.baseAddress!.assumingMemoryBound(to: UInt8.self)
        p[0] = 0x22  // "
        p[1] = 0x30  // 0
        p[2] = 0x30
        p[3] = 0x2D  // -
        withUnsafeBytes(of: traceID.bytes) { Hex.write($0, to: p + 4) }
        p[36] = 0x2D
        withUnsafeBytes(of: spanID.bytes) { Hex.write($0, to: p + 37) }
        p[53] = 0x2D
        withUnsafeBytes(of: flags.rawValue) { Hex.write($0, to: p + 54) }
        p[56] = 0x22
    }

    var header: String {
        withUnsafeTemporaryAllocation(byteCount: Self.headerLength + 2, alignment: 1) { buffer in
            writeQuotedHeader(buffer)
            return String(decoding: UnsafeRawBufferPointer(rebasing: buffer[1...Self.headerLength]), as: UTF8.self)
        }
    }

    var traceIDText: String { traceID.description }
    var spanIDText: String { spanID.description }

    /// Reads a caller's `traceparent` from the raw JSON value (quotes included), as the W3C
    /// Trace Context spec reads it: version 00 is exactly 55 bytes; a later version (not ff) may be
    /// longer and its first 55 bytes are read the same way; lowercase hex only; the trace and parent
    /// ids must not be all zeros. Anything else is no parent (the hop starts a new trace).
    static func parent(inJSON raw: UnsafeRawBufferPointer) -> (TraceID, TraceFlags)? {
        let n = raw.count - 2
        guard n >= headerLength, raw[0] == UInt8(ascii: "\""), raw[raw.count - 1] == UInt8(ascii: "\"") else { return nil }
        let h = UnsafeRawBufferPointer(rebasing: raw[1..<(raw.count - 1)])
        guard let v0 = Hex.nibble(h[0]), let v1 = Hex.nibble(h[1]) else { return nil }
        let version = v0 << 4 | v1
        guard version != 0xFF, version == 0 ? n == headerLength : (n == headerLength || h[headerLength] == UInt8(ascii: "-")) else { return nil }
        guard h[2] == UInt8(ascii: "-"), h[35] == UInt8(ascii: "-"), h[52] == UInt8(ascii: "-") else { return nil }
        var traceBytes = TraceID.null.bytes
        var spanBytes = SpanID.null.bytes
        var flags: UInt8 = 0
        let ok = withUnsafeMutableBytes(of: &traceBytes) { Hex.read(h, from: 3, into: $0) }
            && withUnsafeMutableBytes(of: &spanBytes) { Hex.read(h, from: 36, into: $0) }
            && withUnsafeMutableBytes(of: &flags) { Hex.read(h, from: 53, into: $0) }
        let trace = TraceID(bytes: traceBytes)
        guard ok, trace != .null, SpanID(bytes: spanBytes) != .null else { return nil }
        return (trace, TraceFlags(rawValue: flags))
    }
}

/// Lowercase hex, both ways, without allocating.
enum Hex {
    static let digits: StaticString = "0123456789abcdef"

    /// Two lowercase digits a byte, written at `out`.
    @inline(__always)
    static func write(_ bytes: UnsafeRawBufferPointer, to out: UnsafeMutablePointer<UInt8>) {
        let d = digits.utf8Start
        for i in 0..<bytes.count {
            out[2 * i] = d[Int(bytes[i] >> 4)]
            out[2 * i + 1] = d[Int(bytes[i] & 0x0F)]
        }
    }

    /// Lowercase only, as the W3C spec requires.
    @inline(__always)
    static func nibble(_ c: UInt8) -> UInt8? {
        switch c {
        case 0x30...0x39: return c &- 0x30
        case 0x61...0x66: return c &- 0x61 &+ 10
        default: return nil
        }
    }

    /// Reads `out.count` bytes of hex from `text` at `offset` (the caller has checked the length).
    static func read(_ text: UnsafeRawBufferPointer, from offset: Int, into out: UnsafeMutableRawBufferPointer) -> Bool {
        let t = text.baseAddress!.assumingMemoryBound(to: UInt8.self) + offset
        let o = out.baseAddress!.assumingMemoryBound(to: UInt8.self)
        for i in 0..<out.count {
            guard let hi = nibble(t[2 * i]), let lo = nibble(t[2 * i + 1]) else { return false }
            o[i] = hi << 4 | lo
        }
        return true
    }
}

/// Makes each forwarded call's trace context: the caller's trace with a new span id, or a new trace.
/// Confined to the event loop (the random pool is not locked).
struct Tracer {
    private var random = TraceIDGenerator()

    mutating func hop(parent raw: UnsafeRawBufferPointer?) -> CallTrace {
        // The ids are filled from the generator's words directly: the library's generic
        // `random(using:)` is not specialised across the module boundary (a call per id).
        var spanBytes = SpanID.null.bytes
        withUnsafeMutableBytes(of: &spanBytes) { $0.storeBytes(of: random.next(), as: UInt64.self) }
        let span = SpanID(bytes: spanBytes)
        if let raw, let (trace, flags) = CallTrace.parent(inJSON: raw) {
            return CallTrace(traceID: trace, spanID: span, flags: flags)
        }
        // A new trace: not sampled, since the supervisor records no spans itself; a plugin that
        // exports spans decides for itself.
        var traceBytes = TraceID.null.bytes
        withUnsafeMutableBytes(of: &traceBytes) {
            $0.storeBytes(of: random.next(), as: UInt64.self)
            $0.storeBytes(of: random.next(), toByteOffset: 8, as: UInt64.self)
        }
        return CallTrace(traceID: TraceID(bytes: traceBytes), spanID: span, flags: TraceFlags(rawValue: 0))
    }
}

/// Trace and span ids: SplitMix64 (Steele, Lea and Flood, 2014; the seeding generator of
/// xoshiro) over a seed from the system generator (the kernel's). Ids must be unique, not secret (W3C Trace
/// Context §3.2.2.3), and every forwarded call takes one: a kernel call per id, or even per 512 ids,
/// showed in the call path's profile, this is a multiply and two shifts.
struct TraceIDGenerator: RandomNumberGenerator {
    private var state: UInt64

    init() {
        var system = SystemRandomNumberGenerator()  // getrandom(2)
        state = system.next()
    }

    @inline(__always)
    mutating func next() -> UInt64 {
        state &+= 0x9E37_79B9_7F4A_7C15
        var z = state
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return z ^ (z >> 31)
    }
}

/// Checks a `traceparent` given on the command line (`supervisor call --traceparent`) with the
/// reader the supervisor uses, so what the CLI accepts is what the supervisor continues.
public enum TraceParentArgument {
    /// nil when `text` is a valid traceparent, else why not.
    public static func problem(_ text: String) -> String? {
        let quoted = JSONEscaping.quoted(text)
        if quoted.withUnsafeBytes({ CallTrace.parent(inJSON: $0) }) != nil { return nil }
        return "expected 00-<trace id: 32 lowercase hex digits, not all 0>-<parent id: 16 lowercase hex digits, not all 0>-<flags: 2 hex digits> (55 characters, this has \(text.utf8.count))"
    }
}
