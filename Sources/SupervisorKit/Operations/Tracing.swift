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
    static let headerLength = TraceParentText.length

    /// Writes the header, between JSON quotes, into `out` (57 bytes). On every forwarded call.
    @inline(__always)
    func writeQuotedHeader(_ out: UnsafeMutableRawBufferPointer) {
        withUnsafeBytes(of: traceID.bytes) { trace in
            withUnsafeBytes(of: spanID.bytes) { span in
                TraceParentText.writeQuoted(trace: trace, span: span, flags: flags.rawValue, into: out)
            }
        }
    }

    var header: String {
        withUnsafeTemporaryAllocation(byteCount: Self.headerLength + 2, alignment: 1) { buffer in
            writeQuotedHeader(buffer)
            return String(decoding: UnsafeRawBufferPointer(rebasing: buffer[1...Self.headerLength]), as: UTF8.self)
        }
    }

    var traceIDText: String { traceID.description }
    var spanIDText: String { spanID.description }

    /// Reads a caller's `traceparent` from the raw JSON value (quotes included), as
    /// `TraceParentText.parent` reads it; nil is no parent (the hop starts a new trace).
    static func parent(inJSON raw: UnsafeRawBufferPointer) -> (TraceID, TraceFlags)? {
        var traceBytes = TraceID.null.bytes
        var flags: UInt8 = 0
        let ok = withUnsafeMutableBytes(of: &traceBytes) { TraceParentText.parent(inJSON: raw, trace: $0, flags: &flags) }
        return ok ? (TraceID(bytes: traceBytes), TraceFlags(rawValue: flags)) : nil
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
