import PluginProtocol
import SupervisorCore
import W3CTraceContext

/// One forwarded request's W3C trace context (SPEC §3) as swift-w3c-trace-context's types, for
/// the debug-level call log (`trace_id`, `span_id`): made from the hop's trace (`CallHop.Trace`,
/// which writes the `traceparent` itself) only when calls are logged.
struct CallTrace {
    var traceID: TraceID
    var spanID: SpanID
    var flags: TraceFlags

    init(_ hop: CallHop.Trace) {
        var traceBytes = TraceID.null.bytes
        var spanBytes = SpanID.null.bytes
        withUnsafeMutableBytes(of: &traceBytes) { $0.storeBytes(of: hop.traceID, as: (UInt64, UInt64).self) }
        withUnsafeMutableBytes(of: &spanBytes) { $0.storeBytes(of: hop.spanID, as: UInt64.self) }
        traceID = TraceID(bytes: traceBytes)
        spanID = SpanID(bytes: spanBytes)
        flags = TraceFlags(rawValue: hop.flags)
    }

    var traceIDText: String { traceID.description }
    var spanIDText: String { spanID.description }
}
