import NIOCore
import PluginProtocol
import SupervisorCore

/// An input chunk the supervisor holds for its callee (SPEC §13: a caller may send the first 16
/// chunks of its input before any grant; `StreamCredit.Input`): its element, copied.
struct HeldChunk {
    var seq: UInt64
    var bytes: [UInt8]
    var isBytes: Bool

    init(seq: UInt64, bytes: UnsafeRawBufferPointer, isBytes: Bool) {
        self.seq = seq
        self.bytes = Array(bytes)
        self.isBytes = isBytes
    }
}

/// Whom held input counts for: a worker (its readers' streams) or a control client (its calls that
/// wait for their plugin). The sum is bounded (`SupervisorConfig.heldBytesLimit`).
protocol InputHolder: AnyObject {
    var heldInputBytes: Int { get set }
}

extension WorkerInstance: InputHolder {}
extension ControlConnection: InputHolder {}

/// Input chunks the supervisor holds, oldest first, counted in their holder's `heldInputBytes`
/// while they are here: until the callee grants room (a stream's), or until the call goes to its
/// plugin (a waiting call's). What is still here when it goes (its call ended) is counted out.
final class HeldChunks {
    private var chunks: [HeldChunk] = []
    private weak var holder: (any InputHolder)?

    deinit {
        holder?.heldInputBytes -= Self.size(chunks)
    }

    /// Holds `more` after the others, counted for `holder` (one holder for its life).
    func hold(_ more: [HeldChunk], for holder: any InputHolder) {
        self.holder = holder
        chunks += more
        holder.heldInputBytes += Self.size(more)
    }

    /// The oldest `n`, no longer held.
    func take(_ n: Int) -> ArraySlice<HeldChunk> {
        let taken = chunks.prefix(n)
        chunks.removeFirst(taken.count)
        holder?.heldInputBytes -= Self.size(taken)
        return taken
    }

    /// All of them, no longer held.
    func takeAll() -> [HeldChunk] { Array(take(chunks.count)) }

    private static func size(_ chunks: some Sequence<HeldChunk>) -> Int { chunks.reduce(0) { $0 + $1.bytes.count } }
}

/// What a control client sent for its call with a stream while the call waited for its plugin (a
/// plugin starting, or activated for it): the input's first window and its end, and answer credit
/// beyond the initial window. Kept on the connection under the client's id until the call goes to
/// the plugin (`Router.forward` adopts it) or is answered without going.
final class EarlyStream {
    var credit: StreamCredit
    /// Counted for its client while here.
    let held = HeldChunks()

    init(answers: Bool, input: Bool) {
        credit = StreamCredit(answers: answers, input: input, forwarded: false)
    }
}

extension Router {
    /// A request was queued for its plugin: if it is a client's call with a stream, what the
    /// client sends for it meanwhile is kept (`whileWaiting`).
    func keepsItsStream(_ kind: MessageKind, _ env: Envelope, _ origin: ReplyOrigin) {
        guard kind == .call, env.stream || env.input, case .client(let connection, let clientID) = origin,
              connection.waitingStreams[clientID] == nil else { return }
        connection.waitingStreams[clientID] = EarlyStream(answers: env.stream, input: env.input)
    }

    /// What a client's chunk or credit for a call that waits for its plugin comes to.
    enum EarlyFrame {
        case kept
        /// It may not send it (as for a call in flight): the client is dropped.
        case violation(String)
        /// The client has as much input held for its waiting calls as the supervisor keeps for one
        /// client: this call fails with the error (`refuseWaiting`).
        case overLimit(ErrorBody)
    }

    /// A client's chunk or credit for its call `id` that waits for its plugin, kept in `early`.
    func whileWaiting(_ kind: MessageKind, _ early: EarlyStream, _ env: Envelope, _ bytes: UnsafeRawBufferPointer,
                      client: ControlConnection) -> EarlyFrame {
        if kind == .chunk, let why = StreamFrames.bytesProblem(of: env, in: bytes) { return .violation(why) }
        switch Self.callerFrame(kind, env, bytes, &early.credit) {
        case .refused(let why): return .violation(why)
        case .inputChunk(let seq, let data, let isBytes, _):
            // Within the rules: held, unless this client has as much held as it may.
            if let refused = HeldInput.refusal(holder: "this client", held: client.heldInputBytes, adding: data.count,
                                               limit: config.heldBytesLimit, waiting: true) {
                return .overLimit(refused)
            }
            early.held.hold([HeldChunk(seq: seq, bytes: UnsafeRawBufferPointer(rebasing: bytes[data]), isBytes: isBytes)], for: client)
        case .answerCredit, .inputEnd:
            // Answer credit stays in `early.credit` until the call goes; the end is held with it.
            break
        }
        return .kept
    }

    /// The call goes to the callee now, under `id` on `channel`: what its client sent while it
    /// waited becomes the stream's (answer credit beyond the initial window is told at once; held
    /// input goes as the callee grants room).
    func adopt(_ early: EarlyStream, into flow: StreamFlow, id: UInt64, at instance: WorkerInstance, to channel: Channel) {
        flow.credit = early.credit
        flow.credit.callForwarded()
        // Counted for the plugin now, no longer for the client.
        flow.heldInput.hold(early.held.takeAll(), for: instance)
        let extra = flow.credit.answerCreditBeyondInitial
        if extra > 0 { outbox.write(StreamFrames.credit(id: id, n: UInt64(extra), into: channel.allocator.buffer(capacity: 48)), to: channel) }
        releaseHeldInput(flow, id: id, to: channel)
    }

    /// Held input the callee now has room for goes to it, oldest first, then the input's end if
    /// it waited behind them.
    func releaseHeldInput(_ flow: StreamFlow, id: UInt64, to channel: Channel) {
        let (chunks, end) = flow.credit.releaseHeld()
        for chunk in flow.heldInput.take(chunks) {
            chunk.bytes.withUnsafeBytes { passInput(seq: chunk.seq, $0, isBytes: chunk.isBytes, id: id, flow, to: channel) }
        }
        if end, let count = flow.credit.input?.seq {
            outbox.write(StreamFrames.inputEnd(id: id, count: count, into: channel.allocator.buffer(capacity: 64)), to: channel)
        }
    }

    /// Input chunk `seq` to the callee, under its `id` there: `raw`, its JSON `data` or (`isBytes`)
    /// its inline bytes.
    func passInput(seq: UInt64, _ raw: UnsafeRawBufferPointer, isBytes: Bool, id: UInt64, _ flow: StreamFlow, to channel: Channel) {
        flow.counters.input.increment()
        let buffer = channel.allocator.buffer(capacity: raw.count + 96)
        outbox.write(isBytes ? StreamFrames.bytesChunk(id: id, seq: seq, bytes: raw, input: true, into: buffer)
                             : StreamFrames.chunk(id: id, seq: seq, data: raw, input: true, into: buffer), to: channel)
    }
}
