import NIOCore
import PluginProtocol
import SupervisorCore

/// A call with a stream, as the supervisor passes it on (SPEC §13; docs/protocol.md "Streams").
/// Chunks and credit go through with their ids rewritten, as replies do, and `data` is copied
/// untouched. The supervisor counts each side's credit, so a producer that sends more than its
/// reader granted is stopped here (a worker: protocol violation; a client: dropped) instead of
/// growing a buffer: what is queued for a reader is at most its window. It also keeps the idle
/// timeout: the call's deadline moves with each chunk, never past the whole call's. Confined to
/// the event loop with the pending table that holds it.
final class StreamFlow {
    /// Both sides' credit, counted by the core's rules.
    var credit: StreamCredit
    let idleMs: Int
    let callDeadline: Instant
    let counters: StreamCounters
    /// Input chunks the caller sent beyond the callee's room, oldest first (`StreamCredit.Input`:
    /// at most the initial window), counted for the callee's worker while held.
    let heldInput = HeldChunks()

    init(answers: Bool, input: Bool, idleMs: Int, callDeadline: Instant, counters: StreamCounters) {
        credit = StreamCredit(answers: answers, input: input)
        self.idleMs = idleMs
        self.callDeadline = callDeadline
        self.counters = counters
    }

    /// The request's deadline after a chunk went by at `now`.
    func deadline(after now: Instant) -> Instant { min(callDeadline, now.adding(milliseconds: idleMs)) }

    /// Why the request timed out when its deadline `deadline` passed.
    func timeoutReason(_ deadline: Instant, plugin: String) -> String {
        guard deadline < callDeadline else { return "the stream of \(plugin) did not end within the call's timeout" }
        return "the stream of \(plugin) moved no chunk for \(idleMs) ms (streamIdleTimeoutMs): its reader took none or its producer sent none"
    }
}

extension Router {
    /// The longest a stream to or from `record` may move no chunk: its `limits.streamIdleTimeoutMs`,
    /// else the configuration's; a day for a plugin run with `--debug`.
    func streamIdleTimeout(for record: PluginRecord) -> Int {
        config.isDebugged(record.identifier) ? SupervisorConfig.longestTimeoutMs
            : record.manifest.limits.streamIdleTimeoutMs ?? config.streamIdleTimeoutMs
    }

    /// The stream of a call being forwarded to `record`, if it has one (`"stream"` or `"input"`).
    func streamFlow(_ kind: MessageKind, _ env: Envelope, to record: PluginRecord, callDeadline: Instant) -> StreamFlow? {
        guard kind == .call, env.stream || env.input else { return nil }
        let ms = streamIdleTimeout(for: record)
        let counters = metrics.streams(record.identifier)
        counters.opened.increment()
        return StreamFlow(answers: env.stream, input: env.input, idleMs: ms, callDeadline: callDeadline, counters: counters)
    }

    /// A worker's `chunk` or `credit`, in either role; the reason when it may not send it (a
    /// protocol violation).
    /// `frame` is the buffer `bytes` are read from: a large element is passed on as a slice of it.
    func streamMessage(from instance: WorkerInstance, _ kind: MessageKind, _ env: Envelope, _ bytes: UnsafeRawBufferPointer,
                       frame: ByteBuffer? = nil) -> String? {
        guard let id = env.id else { return "\(kind.rawValue) without an id" }
        switch (kind, env.input) {
        case (.chunk, false): return answerChunk(from: instance, id: id, env, bytes, frame: frame)
        case (.credit, true): return inputCredit(from: instance, id: id, env)
        default:
            // About a call this worker made: an input chunk, credit for the answer. One that ended
            // meanwhile (answered, timed out) is past caring.
            guard let entry = instance.outgoing[id] else { return nil }
            return fromCaller(kind, entry, env, bytes)
        }
    }

    /// From a caller (a worker, a control client, the embedding program) about its call `entry`
    /// in flight: an input chunk or its end, or credit for the answer. The reason when it may not.
    func fromCaller(_ kind: MessageKind, _ entry: (callee: WorkerInstance, id: UInt64), _ env: Envelope,
                    _ bytes: UnsafeRawBufferPointer) -> String? {
        if kind == .chunk, let why = StreamFrames.bytesProblem(of: env, in: bytes) { return why }
        let callee = entry.callee
        guard let request = callee.pending[entry.id] else { return nil }
        guard let flow = request.stream else { return "\(kind.rawValue) for a call made without a stream" }
        guard let channel = callee.channel else { return nil }
        switch Self.callerFrame(kind, env, bytes, &flow.credit) {
        case .refused(let why): return why
        case .answerCredit(let n):
            outbox.write(StreamFrames.credit(id: entry.id, n: n, into: channel.allocator.buffer(capacity: 48)), to: channel)
        case .inputEnd(let count, let now):
            if now { outbox.write(StreamFrames.inputEnd(id: entry.id, count: count, into: channel.allocator.buffer(capacity: 64)), to: channel) }
        case .inputChunk(let seq, let data, let isBytes, let now):
            callee.pending[entry.id]?.deadline = flow.deadline(after: .now)
            let raw = UnsafeRawBufferPointer(rebasing: bytes[data])
            if now {
                passInput(seq: seq, raw, isBytes: isBytes, id: entry.id, flow, to: channel)
            } else if let refused = HeldInput.refusal(holder: callee.identifier, held: callee.heldInputBytes, adding: raw.count,
                                                      limit: config.heldBytesLimit) {
                // Its reader has more held for it than the supervisor keeps for one plugin: this
                // stream ends here, its caller told why and the callee told to cancel.
                guard let request = callee.pending.settle(entry.id) else { return nil }
                shared.settled(request, .unavailable, by: callee)
                outbox.answer(request.origin, error: refused)
                shared.sendCancel(entry.id, to: callee)
                shared.callLeft(callee)
            } else {
                flow.heldInput.hold([HeldChunk(seq: seq, bytes: raw, isBytes: isBytes)], for: callee)
            }
        }
        return nil
    }

    /// A caller's `credit` or `chunk` for its call with a stream, as its `credit` counts it.
    enum CallerFrame {
        /// Room for `n` more answer chunks, to pass on to the callee.
        case answerCredit(UInt64)
        /// The input ends after `count` chunks: `now`, or after the chunks held (`releaseHeld`).
        case inputEnd(count: UInt64, now: Bool)
        /// Input chunk `seq`, its element at `data` (`isBytes`: inline bytes): to pass on `now`, or
        /// to hold until the callee has room.
        case inputChunk(seq: UInt64, data: Range<Int>, isBytes: Bool, now: Bool)
        /// Not allowed: the reason.
        case refused(String)
    }

    /// What a caller's stream frame is, checked against `credit` (which it moves on, unless it is
    /// refused): the same rules for a call in flight and one that waits for its plugin.
    static func callerFrame(_ kind: MessageKind, _ env: Envelope, _ bytes: UnsafeRawBufferPointer,
                            _ credit: inout StreamCredit) -> CallerFrame {
        if kind == .credit {
            guard !env.input else { return .refused("input credit from the caller (the callee grants it)") }
            if let refused = credit.grantAnswer(env.n) { return .refused(refused) }
            return .answerCredit(env.n ?? 0)
        }
        guard env.input else { return .refused("an answer chunk from the caller (input chunks carry \"input\": true)") }
        let element = StreamFrames.element(of: env)
        switch credit.inputChunk(seq: env.seq, end: env.end, hasData: element != nil) {
        case .refused(let why): return .refused(why)
        case .end(let count): return .inputEnd(count: count, now: true)
        case .endHeld(let count): return .inputEnd(count: count, now: false)
        case .chunk(let seq):
            guard let (data, isBytes) = element else { return .refused("an input chunk without data") }
            return .inputChunk(seq: seq, data: data, isBytes: isBytes, now: true)
        case .hold(let seq):
            guard let (data, isBytes) = element else { return .refused("an input chunk without data") }
            return .inputChunk(seq: seq, data: data, isBytes: isBytes, now: false)
        }
    }

    /// A chunk of the answer to request `id` of the supervisor's, passed on to whoever asked.
    private func answerChunk(from instance: WorkerInstance, id: UInt64, _ env: Envelope, _ bytes: UnsafeRawBufferPointer,
                             frame: ByteBuffer?) -> String? {
        guard let request = instance.pending[id] else {
            // Late chunks of a call that ended (timed out, cancelled) are expected; others are not.
            return !instance.pending.wasIssued(id) ? "chunk for id \(id), which was never asked" : nil
        }
        guard let flow = request.stream, flow.credit.answers else { return "chunk for \(request.what) \(id), which did not ask for a stream" }
        let seq = flow.credit.seq
        guard env.seq == seq else { return "chunk \(env.seq.map { "\($0)" } ?? "without seq") of call \(id), expected \(seq)" }
        guard let (data, isBytes) = StreamFrames.element(of: env) else { return "chunk of call \(id) without data" }
        if let refused = flow.credit.answerChunk(seq: env.seq, id: id) { return refused }
        flow.counters.answer.increment()
        instance.pending[id]?.deadline = flow.deadline(after: .now)
        let raw = UnsafeRawBufferPointer(rebasing: bytes[data])
        switch request.origin {
        case .client(let connection, let clientID):
            guard !connection.closed else { return nil }
            connection.lastActivity = .now()
            passOn(id: clientID, seq: seq, data, raw, isBytes: isBytes, of: frame, to: connection.channel)
        case .plugin(let caller, let callerID):
            guard let channel = caller.channel else { return nil }
            passOn(id: callerID, seq: seq, data, raw, isBytes: isBytes, of: frame, to: channel)
        case .host(let host):
            // The element: its raw bytes, or its JSON.
            host.chunk(Array(raw))
        case .local:
            break
        }
        return nil
    }

    /// Elements at least this large are passed on as a slice of the frame they came in (three
    /// buffers in one `writev`), not copied into a new one.
    static let sliceAbove = 4096

    /// Writes an answer's chunk, its element (the range `range` of `frame`, read as `raw`: raw JSON
    /// `data`, or with `isBytes` its inline bytes), to `channel` under the caller's `id`.
    private func passOn(id: UInt64, seq: UInt64, _ range: Range<Int>, _ raw: UnsafeRawBufferPointer, isBytes: Bool = false,
                        of frame: ByteBuffer?, to channel: Channel) {
        guard raw.count >= Self.sliceAbove, let frame, let slice = frame.getSlice(at: frame.readerIndex + range.lowerBound, length: range.count) else {
            let buffer = channel.allocator.buffer(capacity: raw.count + 96)
            return outbox.write(isBytes ? StreamFrames.bytesChunk(id: id, seq: seq, bytes: raw, into: buffer)
                                        : StreamFrames.chunk(id: id, seq: seq, data: raw, into: buffer), to: channel)
        }
        if isBytes {
            outbox.write(StreamFrames.bytesChunkHead(id: id, seq: seq, count: raw.count, into: channel.allocator.buffer(capacity: 96)), to: channel)
            return outbox.write(slice, to: channel)
        }
        outbox.write(StreamFrames.chunkHead(id: id, seq: seq, dataCount: raw.count, into: channel.allocator.buffer(capacity: 64)), to: channel)
        outbox.write(slice, to: channel)
        outbox.write(Self.chunkTail, to: channel)
    }

    private static let chunkTail: ByteBuffer = ByteBuffer(bytes: StreamFrames.chunkTail)

    /// The callee grants room for more of a call's input: passed on to the caller.
    private func inputCredit(from instance: WorkerInstance, id: UInt64, _ env: Envelope) -> String? {
        guard let request = instance.pending[id] else {
            return !instance.pending.wasIssued(id) ? "credit for id \(id), which was never asked" : nil
        }
        guard let flow = request.stream else { return "input credit for \(request.what) \(id), which came without input" }
        if let refused = flow.credit.grantInput(env.n, what: "\(request.what) \(id)") { return refused }
        guard let n = env.n else { return nil }
        if let channel = instance.channel { releaseHeldInput(flow, id: id, to: channel) }
        switch request.origin {
        case .client(let connection, let clientID):
            guard !connection.closed else { return nil }
            outbox.write(StreamFrames.credit(id: clientID, n: n, input: true, into: connection.channel.allocator.buffer(capacity: 48)), to: connection.channel)
        case .plugin(let caller, let callerID):
            guard let channel = caller.channel else { return nil }
            outbox.write(StreamFrames.credit(id: callerID, n: n, input: true, into: channel.allocator.buffer(capacity: 48)), to: channel)
        case .host(let host):
            host.inputCredit(n)
        case .local:
            break
        }
        return nil
    }
}
