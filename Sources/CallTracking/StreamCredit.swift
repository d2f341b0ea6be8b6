import PluginProtocol

/// The credit of one call with a stream, as the supervisor counts it between its two ends (SPEC
/// §13): chunks of the answer the callee may still send, and chunks of the input the caller may
/// still send. Each input returns the reason when the frame may not be sent (the sender broke
/// the protocol) and changes nothing then; a producer that sends beyond its reader's window is
/// stopped here instead of growing a buffer.
package struct StreamCredit: Sendable, Equatable {
    /// Whether the call asked for an answer of chunks.
    package let answers: Bool
    /// Answer chunks the callee may still send: the initial window, plus what the caller granted,
    /// minus the chunks passed on.
    package private(set) var credit = StreamFrames.initialCredit
    /// The next answer chunk's `seq`.
    package private(set) var seq: UInt64 = 0
    /// The caller's input, when the call came with one.
    package private(set) var input: Input?

    /// The input side, counted as two windows with the supervisor between them. The caller may
    /// send the initial window (SPEC §13: 16 chunks) before any grant, and what its reader grants
    /// besides (passed on to it); the callee has room only for what it granted itself (its
    /// reader grants the first window when it starts reading, the Swift SDK as the method
    /// starts). A chunk the callee has no room for yet is held by the supervisor until it has:
    /// never more than the initial window, since the caller's window exceeds the callee's grants
    /// by exactly that much.
    package struct Input: Sendable, Equatable {
        /// Chunks the caller may still send.
        package var credit = StreamFrames.initialCredit
        /// Chunks the callee has room for and has not been sent.
        package var room = 0
        /// Chunks received from the caller and not yet passed on, oldest first.
        package var held = 0
        /// The input's end came while chunks were held: it goes on after them.
        package var endHeld = false
        package var seq: UInt64 = 0
        package var ended = false
        /// The call has gone to the callee: until it has, everything the caller sends is held.
        package var forwarded = true
    }

    /// `forwarded`: false for a call that waits for its plugin, whose caller may send its input's
    /// first window already (`callForwarded` when it goes).
    package init(answers: Bool, input: Bool, forwarded: Bool = true) {
        self.answers = answers
        self.input = input ? Input(forwarded: forwarded) : nil
    }

    /// The call has gone to the callee: what was held may go on as the callee grants room.
    package mutating func callForwarded() {
        input?.forwarded = true
    }

    /// Answer chunks the caller granted beyond the initial window before the call went to the
    /// callee: the callee is told them with the call.
    package var answerCreditBeyondInitial: Int { max(0, credit - StreamFrames.initialCredit) }

    /// The caller grants `n` more answer chunks.
    package mutating func grantAnswer(_ n: UInt64?) -> String? {
        guard answers else { return "credit for a call that did not ask for a stream (\"stream\": true)" }
        guard let n, n > 0, StreamFrames.creditFits(credit, n) else {
            return "credit \(n.map { "\($0)" } ?? "without n"): n is from 1 to what keeps the window within \(StreamFrames.largestCredit) chunks"
        }
        credit += Int(n)
        return nil
    }

    /// The caller's own plugin grants `n` more answer chunks: trusted, so clamped to the largest
    /// window rather than refused (a worker's calls over peer links).
    package mutating func grantAnswer(clamping n: UInt64) {
        credit = StreamFrames.creditClamped(credit, n)
    }

    /// The callee sends answer chunk `seq` of call `id`; on success it takes one credit, and the
    /// chunk goes on with that `seq`.
    package mutating func answerChunk(seq sent: UInt64?, id: UInt64) -> String? {
        guard sent == seq else { return "chunk \(sent.map { "\($0)" } ?? "without seq") of call \(id), expected \(seq)" }
        guard credit > 0 else { return "chunk \(seq) of call \(id) beyond the credit its reader granted" }
        credit -= 1
        seq += 1
        return nil
    }

    /// What an input frame from the caller is.
    package enum InputStep: Equatable, Sendable {
        /// The input's end after `count` chunks: passed on.
        case end(count: UInt64)
        /// The end, after chunks still held: passed on after them (`releaseHeld`).
        case endHeld(count: UInt64)
        /// Chunk `seq`, within the callee's room: passed on.
        case chunk(seq: UInt64)
        /// Chunk `seq`, within the caller's window but beyond the callee's room: held until the
        /// callee grants more (`releaseHeld`).
        case hold(seq: UInt64)
        /// Not allowed: the reason.
        case refused(String)
    }

    /// The caller sends input chunk `seq` (or the input's end). `hasData`: it carries an element.
    package mutating func inputChunk(seq sent: UInt64?, end: Bool, hasData: Bool) -> InputStep {
        guard var state = input else { return .refused("an input chunk for a call made without \"input\": true") }
        guard !state.ended else { return .refused("an input chunk after the input's end") }
        guard sent == state.seq else { return .refused("input chunk \(sent.map { "\($0)" } ?? "without seq"), expected \(state.seq)") }
        if end {
            state.ended = true
            state.endHeld = state.held > 0 || !state.forwarded
            input = state
            return state.endHeld ? .endHeld(count: state.seq) : .end(count: state.seq)
        }
        guard hasData else { return .refused("an input chunk without data") }
        guard state.credit > 0 else { return .refused("input chunk \(state.seq) beyond the credit its reader granted") }
        state.credit -= 1
        state.seq += 1
        // In order: while any is held, a new one waits behind it.
        let passes = state.forwarded && state.room > 0 && state.held == 0
        if passes { state.room -= 1 } else { state.held += 1 }
        input = state
        return passes ? .chunk(seq: state.seq - 1) : .hold(seq: state.seq - 1)
    }

    /// The callee grants `n` more input chunks (the caller's window grows as much: the grant is
    /// passed on to it). `what`: the request, for the reason.
    package mutating func grantInput(_ n: UInt64?, what: String) -> String? {
        guard var state = input else { return "input credit for \(what), which came without input" }
        guard let n, n > 0, StreamFrames.creditFits(state.room, n) else {
            return "input credit \(n.map { "\($0)" } ?? "without n"): n is from 1 to what keeps the window within \(StreamFrames.largestCredit) chunks"
        }
        state.room += Int(n)
        state.credit += Int(n)
        input = state
        return nil
    }

    /// What held input may go on now that the callee has room: the oldest `chunks` of those held,
    /// then the input's end if it was held behind them.
    package mutating func releaseHeld() -> (chunks: Int, end: Bool) {
        guard var state = input, state.held > 0 || state.endHeld else { return (0, false) }
        let chunks = min(state.room, state.held)
        state.room -= chunks
        state.held -= chunks
        let end = state.endHeld && state.held == 0
        if end { state.endHeld = false }
        input = state
        return (chunks, end)
    }
}
