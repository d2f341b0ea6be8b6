/// Call timeouts the supervisor and the workers agree on: the default for a call that names none
/// (`callTimeoutMs` in the configuration starts here) and the longest a call may ask for (a day;
/// also what stands for "no timeout" in debug mode).
public enum CallTimeouts {
    public static let defaultMs = 30_000
    public static let longestMs = 24 * 3_600_000
}

/// The rules of one forwarding hop of a `call` or `open` (docs/protocol.md "call", "Peer links"),
/// written once for the two places that forward: the supervisor (`Router.forward`) and a callee's
/// worker serving a call that came over a peer link. What a hop decides:
/// - the call's timeout (`timeoutMs(requested:otherwise:)`);
/// - the forwarded frame: the new id, the request's `target`, `method` and `params` (or `uri`)
///   bytes copied untouched, `from`, and the `traceparent` hop (`forward`);
/// - how a call ended and how long it took, in the supervisor's histogram (`Outcome`,
///   `bucketBounds`, `Tally`, CallHop+Outcome.swift);
/// - what a caller's worker reports of the calls it sent over a link (`LinkCalls`,
///   CallHop+LinkCalls.swift).
///
/// A value holds only the trace id generator: one per owner (the supervisor's event loop, a
/// worker's links thread), not locked.
public struct CallHop {
    @usableFromInline var ids: TraceIDGenerator

    public init() {
        ids = TraceIDGenerator()
    }

    // MARK: The timeout

    /// A call's timeout in ms: its own `timeoutMs` if it asked for one (> 0), at most a day; else
    /// `calleeMs`, the callee's (its manifest's `limits.callTimeoutMs`, else the configuration's).
    @inlinable
    public static func timeoutMs(requested: UInt64?, otherwise calleeMs: Int) -> Int {
        if let requested, requested > 0 { return Int(min(requested, UInt64(CallTimeouts.longestMs))) }
        return calleeMs
    }

    // MARK: The forwarded frame

    /// Room to reserve for the frame `forward` writes from a request body of `count` bytes: what
    /// it adds is the `traceparent` and `from` (without it, every frame reallocates).
    @inlinable
    public static func frameCapacity(forwarding count: Int, from caller: String?) -> Int {
        count + 96 + (caller?.utf8.count ?? 0)
    }

    /// Writes the forwarded `kind` (`call` or `open`) frame of the request `env` (in `bytes`, its
    /// fields already checked: a call has `target` and `method`, an open `uri`) at the end of
    /// `sink`: `id`, the request's `target`, `method`, `params` or its `uri` as they were sent,
    /// `from` when a plugin calls (a `from` in the request is dropped), and the `traceparent` hop
    /// (`nextTrace`). Returns the sink holding the frame and the hop's trace (for a log line).
    /// No allocation of its own.
    @inlinable
    public mutating func forward<Sink: FrameSink>(_ kind: MessageKind, id: UInt64, from caller: String?, _ env: Envelope,
                                                  in bytes: UnsafeRawBufferPointer, into sink: consuming Sink) -> (frame: Sink, trace: Trace) {
        // `sink` is consumed: the encoder holds the only reference, so its first append does not
        // copy the buffer (copy on write).
        var frame = FrameEncoder(kind: kind, into: consume sink)
        frame.uint("id", id)
        if kind == .call {
            frame.raw("target", UnsafeRawBufferPointer(rebasing: bytes[env.target!]))
            frame.raw("method", UnsafeRawBufferPointer(rebasing: bytes[env.method!]))
            if let p = env.params { frame.raw("params", UnsafeRawBufferPointer(rebasing: bytes[p])) }
            // A stream's flags (docs/protocol.md "Streams").
            if env.stream { frame.flag("stream") }
            if env.input { frame.flag("input") }
        } else {
            frame.raw("uri", UnsafeRawBufferPointer(rebasing: bytes[env.uri!]))
        }
        if let caller { frame.string("from", caller) }
        let trace = nextTrace(parent: env.traceparent.map { UnsafeRawBufferPointer(rebasing: bytes[$0]) })
        withUnsafeTemporaryAllocation(byteCount: TraceParentText.length + 2, alignment: 1) { out in
            trace.writeQuoted(into: out)
            frame.raw("traceparent", UnsafeRawBufferPointer(out))
        }
        // Bytes attached inline (docs/protocol.md "Bytes") go on with it, as they came.
        if let a = env.attachments {
            frame.raw("attachments", UnsafeRawBufferPointer(rebasing: bytes[a]))
            return (frame.finish(tail: env.tail.map { UnsafeRawBufferPointer(rebasing: bytes[$0]) } ?? UnsafeRawBufferPointer(start: nil, count: 0)), trace)
        }
        return (frame.finish(), trace)
    }

    // MARK: The trace

    /// One hop's W3C trace context (SPEC §3): the trace it belongs to, the span id this hop gave
    /// it, and the caller's flags. The ids are kept as the bytes they are written as.
    public struct Trace: Sendable {
        /// The trace id's 16 bytes.
        public var traceID: (UInt64, UInt64)
        /// The span id's 8 bytes.
        public var spanID: UInt64
        public var flags: UInt8
        /// Whether it continues the caller's trace (else it is a new one).
        public var continued: Bool

        @inlinable
        public init(traceID: (UInt64, UInt64), spanID: UInt64, flags: UInt8, continued: Bool) {
            self.traceID = traceID
            self.spanID = spanID
            self.flags = flags
            self.continued = continued
        }

        /// Writes `"00-<trace id>-<span id>-<flags>"`, quotes included, into `out` (57 bytes).
        @inlinable
        public func writeQuoted(into out: UnsafeMutableRawBufferPointer) {
            var trace = traceID
            var span = spanID
            withUnsafeBytes(of: &trace) { t in
                withUnsafeBytes(of: &span) { s in TraceParentText.writeQuoted(trace: t, span: s, flags: flags, into: out) }
            }
        }

        /// The `traceparent` text (55 bytes, no quotes).
        public var header: String {
            withUnsafeTemporaryAllocation(byteCount: TraceParentText.length + 2, alignment: 1) { out in
                writeQuoted(into: out)
                return String(decoding: UnsafeRawBufferPointer(rebasing: out[1...TraceParentText.length]), as: UTF8.self)
            }
        }
    }

    /// The next hop's trace: the caller's trace id and flags with a new span id when `parent` (the
    /// raw JSON value of the request's `traceparent`, quotes included) is a valid one
    /// (`TraceParentText.parent`), else a new trace, not sampled (the supervisor records no spans
    /// itself; a plugin that exports spans decides for itself).
    @inlinable
    public mutating func nextTrace(parent: UnsafeRawBufferPointer?) -> Trace {
        var trace: (UInt64, UInt64) = (0, 0)
        var flags: UInt8 = 0
        let continued = parent.map { p in withUnsafeMutableBytes(of: &trace) { TraceParentText.parent(inJSON: p, trace: $0, flags: &flags) } } ?? false
        if !continued {
            trace = (ids.next(), ids.next())
            flags = 0
        }
        return Trace(traceID: trace, spanID: ids.next(), flags: flags, continued: continued)
    }
}
