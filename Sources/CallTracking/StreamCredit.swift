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

    /// The input side: the callee grants the first window itself (an input waits until its reader
    /// runs, which keeps it out of the supervisor while the call waits for a plugin to start).
    package struct Input: Sendable, Equatable {
        package var credit = 0
        package var seq: UInt64 = 0
        package var ended = false
    }

    package init(answers: Bool, input: Bool) {
        self.answers = answers
        self.input = input ? Input() : nil
    }

    /// The caller grants `n` more answer chunks.
    package mutating func grantAnswer(_ n: UInt64?) -> String? {
        guard answers else { return "credit for a call that did not ask for a stream (\"stream\": true)" }
        guard let n, n > 0, UInt64(credit) + n <= StreamFrames.largestCredit else {
            return "credit \(n.map { "\($0)" } ?? "without n"): n is from 1 to what keeps the window within \(StreamFrames.largestCredit) chunks"
        }
        credit += Int(n)
        return nil
    }

    /// The caller's own plugin grants `n` more answer chunks: trusted, so clamped to the largest
    /// window rather than refused (a worker's calls over peer links).
    package mutating func grantAnswer(clamping n: UInt64) {
        credit = Int(min(UInt64(credit) + n, StreamFrames.largestCredit))
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
        /// Chunk `seq`, within the window: passed on.
        case chunk(seq: UInt64)
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
            input = state
            return .end(count: state.seq)
        }
        guard hasData else { return .refused("an input chunk without data") }
        guard state.credit > 0 else { return .refused("input chunk \(state.seq) beyond the credit its reader granted") }
        state.credit -= 1
        state.seq += 1
        input = state
        return .chunk(seq: state.seq - 1)
    }

    /// The callee grants `n` more input chunks. `what`: the request, for the reason.
    package mutating func grantInput(_ n: UInt64?, what: String) -> String? {
        guard var state = input else { return "input credit for \(what), which came without input" }
        guard let n, n > 0, UInt64(state.credit) + n <= StreamFrames.largestCredit else {
            return "input credit \(n.map { "\($0)" } ?? "without n"): n is from 1 to what keeps the window within \(StreamFrames.largestCredit) chunks"
        }
        state.credit += Int(n)
        input = state
        return nil
    }
}
