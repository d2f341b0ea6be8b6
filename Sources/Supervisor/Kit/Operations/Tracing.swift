#if canImport(Glibc)
import Glibc
#endif
import LinuxSupport
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

    /// Writes the header, between JSON quotes, into `out` (57 bytes).
    func writeQuotedHeader(_ out: UnsafeMutableRawBufferPointer) {
        out[0] = UInt8(ascii: "\"")
        out[1] = UInt8(ascii: "0")
        out[2] = UInt8(ascii: "0")
        out[3] = UInt8(ascii: "-")
        withUnsafeBytes(of: traceID.bytes) { Hex.write($0, into: out, at: 4) }
        out[36] = UInt8(ascii: "-")
        withUnsafeBytes(of: spanID.bytes) { Hex.write($0, into: out, at: 37) }
        out[53] = UInt8(ascii: "-")
        withUnsafeBytes(of: flags.rawValue) { Hex.write($0, into: out, at: 54) }
        out[56] = UInt8(ascii: "\"")
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

    static func write(_ bytes: UnsafeRawBufferPointer, into out: UnsafeMutableRawBufferPointer, at offset: Int) {
        let d = digits.utf8Start
        var o = offset
        for b in bytes {
            out[o] = d[Int(b >> 4)]
            out[o + 1] = d[Int(b & 0x0F)]
            o += 2
        }
    }

    /// Lowercase only, as the W3C spec requires.
    static func nibble(_ c: UInt8) -> UInt8? {
        switch c {
        case UInt8(ascii: "0")...UInt8(ascii: "9"): return c - UInt8(ascii: "0")
        case UInt8(ascii: "a")...UInt8(ascii: "f"): return c - UInt8(ascii: "a") + 10
        default: return nil
        }
    }

    static func read(_ text: UnsafeRawBufferPointer, from offset: Int, into out: UnsafeMutableRawBufferPointer) -> Bool {
        for i in 0..<out.count {
            guard let hi = nibble(text[offset + 2 * i]), let lo = nibble(text[offset + 2 * i + 1]) else { return false }
            out[i] = hi << 4 | lo
        }
        return true
    }
}

/// Makes each forwarded call's trace context: the caller's trace with a new span id, or a new trace.
/// Confined to the event loop (the random pool is not locked).
struct Tracer {
    private var random = RandomPool()

    mutating func hop(parent raw: UnsafeRawBufferPointer?) -> CallTrace {
        let span = SpanID.random(using: &random)
        if let raw, let (trace, flags) = CallTrace.parent(inJSON: raw) {
            return CallTrace(traceID: trace, spanID: span, flags: flags)
        }
        // A new trace: not sampled, since the supervisor records no spans itself; a plugin that
        // exports spans decides for itself.
        return CallTrace(traceID: TraceID.random(using: &random), spanID: span, flags: [])
    }
}

/// Random bits from the kernel's generator, fetched 4 KiB at a time: one getrandom(2) per 512 span
/// ids instead of one per call.
struct RandomPool: RandomNumberGenerator {
    private var words = [UInt64](repeating: 0, count: 512)
    private var used = 512

    mutating func next() -> UInt64 {
        if used == words.count { refill() }
        defer { used += 1 }
        return words[used]
    }

    private mutating func refill() {
        words.withUnsafeMutableBytes { buffer in
            do { try KernelRandom.fill(buffer) } catch {
                // Only a kernel without getrandom refuses; the system generator is the fallback.
                var system = SystemRandomNumberGenerator()
                for i in stride(from: 0, to: buffer.count, by: 8) {
                    buffer.storeBytes(of: system.next(), toByteOffset: i, as: UInt64.self)
                }
            }
        }
        used = 0
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
