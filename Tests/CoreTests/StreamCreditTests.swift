import Testing
import SupervisorCore

/// A stream's credit between its two ends (Streams/StreamCredit.swift): what each side may send,
/// and that a refused frame changes nothing.
@Suite struct StreamCreditTests {
    @Test func theCalleeMaySendTheInitialWindowThenWaitsForCredit() {
        var credit = StreamCredit(answers: true, input: false)
        for seq in 0..<UInt64(StreamFrames.initialCredit) { #expect(credit.answerChunk(seq: seq, id: 1) == nil) }
        let over = UInt64(StreamFrames.initialCredit)
        #expect(credit.answerChunk(seq: over, id: 1) == "chunk \(over) of call 1 beyond the credit its reader granted")
        #expect(credit.seq == over, "a refused chunk does not advance")
        #expect(credit.grantAnswer(2) == nil)
        #expect(credit.answerChunk(seq: over, id: 1) == nil)
        #expect(credit.credit == 1)
    }

    @Test func chunksComeInOrder() {
        var credit = StreamCredit(answers: true, input: false)
        #expect(credit.answerChunk(seq: 1, id: 9) == "chunk 1 of call 9, expected 0")
        #expect(credit.answerChunk(seq: nil, id: 9) == "chunk without seq of call 9, expected 0")
        #expect(credit.credit == StreamFrames.initialCredit)
    }

    @Test func creditIsBoundedAndPositive() {
        var credit = StreamCredit(answers: true, input: false)
        #expect(credit.grantAnswer(0) != nil)
        #expect(credit.grantAnswer(nil) != nil)
        #expect(credit.grantAnswer(StreamFrames.largestCredit) != nil, "over the largest window with the initial credit")
        #expect(credit.grantAnswer(StreamFrames.largestCredit - UInt64(StreamFrames.initialCredit)) == nil)
        #expect(UInt64(credit.credit) == StreamFrames.largestCredit)
    }

    /// A peer's `n` of 2^64 - 1 (from a control client or a plugin) is refused, not an overflow:
    /// it crashed the supervisor once the window held any credit.
    @Test func theLargestNumberAPeerCanSendIsRefusedNotAnOverflow() {
        var answers = StreamCredit(answers: true, input: false)
        #expect(answers.grantAnswer(UInt64.max)?.contains("n is from 1 to what keeps the window within") == true)
        #expect(answers.grantAnswer(UInt64.max - 5) != nil)
        #expect(answers.credit == StreamFrames.initialCredit, "a refused grant changes nothing")
        answers.grantAnswer(clamping: UInt64.max)
        #expect(answers.credit == Int(StreamFrames.largestCredit))
        var input = StreamCredit(answers: false, input: true)
        #expect(input.grantInput(1, what: "call 1") == nil)
        #expect(input.grantInput(UInt64.max, what: "call 1")?.contains("input credit 18446744073709551615") == true)
        #expect(input.input?.room == 1)
        #expect(StreamFrames.creditClamped(-3, UInt64.max) == Int(StreamFrames.largestCredit))
        #expect(!StreamFrames.creditFits(-1, 1) && StreamFrames.creditFits(0, StreamFrames.largestCredit))
    }

    @Test func creditForACallWithoutAStreamIsRefused() {
        var credit = StreamCredit(answers: false, input: true)
        #expect(credit.grantAnswer(1) == "credit for a call that did not ask for a stream (\"stream\": true)")
    }

    @Test func theCallerMaySendTheInitialWindowWhichIsHeldUntilTheCalleeGrantsRoom() {
        var credit = StreamCredit(answers: false, input: true)
        let window = UInt64(StreamFrames.initialCredit)
        for seq in 0..<window { #expect(credit.inputChunk(seq: seq, end: false, hasData: true) == .hold(seq: seq)) }
        #expect(credit.inputChunk(seq: window, end: false, hasData: true) == .refused("input chunk \(window) beyond the credit its reader granted"))
        #expect(credit.input?.held == StreamFrames.initialCredit)
        // The callee grants 4: the 4 oldest go on; the caller may send 4 more, held behind the rest.
        #expect(credit.grantInput(4, what: "call 1") == nil)
        #expect(credit.releaseHeld() == (chunks: 4, end: false))
        #expect(credit.inputChunk(seq: window, end: false, hasData: true) == .hold(seq: window))
        #expect(credit.input?.held == StreamFrames.initialCredit - 3)
        // The end waits behind what is held, and goes once they have.
        #expect(credit.inputChunk(seq: window + 1, end: true, hasData: false) == .endHeld(count: window + 1))
        #expect(credit.grantInput(100, what: "call 1") == nil)
        #expect(credit.releaseHeld() == (chunks: StreamFrames.initialCredit - 3, end: true))
        #expect(credit.releaseHeld() == (chunks: 0, end: false), "released once")
    }

    @Test func withRoomAndNothingHeldAChunkGoesOnAtOnce() {
        var credit = StreamCredit(answers: false, input: true)
        #expect(credit.grantInput(2, what: "call 1") == nil)
        #expect(credit.inputChunk(seq: 0, end: false, hasData: true) == .chunk(seq: 0))
        #expect(credit.inputChunk(seq: 1, end: false, hasData: true) == .chunk(seq: 1))
        #expect(credit.inputChunk(seq: 2, end: false, hasData: true) == .hold(seq: 2), "no room left: held")
        #expect(credit.inputChunk(seq: 3, end: true, hasData: false) == .endHeld(count: 3))
    }

    @Test func beforeTheCallIsForwardedEverythingIsHeldEvenTheEnd() {
        var credit = StreamCredit(answers: true, input: true, forwarded: false)
        #expect(credit.inputChunk(seq: 0, end: true, hasData: false) == .endHeld(count: 0))
        #expect(credit.grantAnswer(8) == nil)
        #expect(credit.answerCreditBeyondInitial == 8)
        credit.callForwarded()
        #expect(credit.releaseHeld() == (chunks: 0, end: true), "an empty input's end goes right after the call")
        var waiting = StreamCredit(answers: false, input: true, forwarded: false)
        #expect(waiting.grantInput(5, what: "call 2") == nil)
        #expect(waiting.inputChunk(seq: 0, end: false, hasData: true) == .hold(seq: 0), "held while the call waits, room or not")
        waiting.callForwarded()
        #expect(waiting.releaseHeld() == (chunks: 1, end: false))
    }

    @Test func theInputEndsOnceAndNothingFollows() {
        var credit = StreamCredit(answers: false, input: true)
        _ = credit.grantInput(1, what: "call 1")
        #expect(credit.inputChunk(seq: 0, end: false, hasData: true) == .chunk(seq: 0))
        #expect(credit.inputChunk(seq: 1, end: true, hasData: false) == .end(count: 1))
        #expect(credit.inputChunk(seq: 1, end: false, hasData: true) == .refused("an input chunk after the input's end"))
        #expect(credit.input?.ended == true)
    }

    @Test func inputRulesNameWhatIsWrong() {
        var none = StreamCredit(answers: true, input: false)
        #expect(none.inputChunk(seq: 0, end: false, hasData: true) == .refused("an input chunk for a call made without \"input\": true"))
        #expect(none.grantInput(1, what: "call 4") == "input credit for call 4, which came without input")
        var credit = StreamCredit(answers: false, input: true)
        _ = credit.grantInput(3, what: "call 1")
        #expect(credit.inputChunk(seq: 5, end: false, hasData: true) == .refused("input chunk 5, expected 0"))
        #expect(credit.inputChunk(seq: 0, end: false, hasData: false) == .refused("an input chunk without data"))
        #expect(credit.input?.credit == StreamFrames.initialCredit + 3 && credit.input?.room == 3, "refused chunks take no credit")
        #expect(credit.grantInput(0, what: "call 1") != nil)
    }

    @Test func whatTheSupervisorHoldsNeverExceedsTheInitialWindow() {
        // Random grants from the callee and chunks from a caller that sends all it may: the
        // supervisor holds at most the initial window, and passes on no more than was granted.
        var rng = SplitMix(seed: 7)
        var credit = StreamCredit(answers: false, input: true)
        var granted = 0, passed = 0, seq: UInt64 = 0
        for _ in 0..<5_000 {
            if rng.next() % 3 == 0 {
                let n = Int(rng.next() % 6) + 1
                if credit.grantInput(UInt64(n), what: "call 1") == nil { granted += n }
                passed += credit.releaseHeld().chunks
            } else {
                switch credit.inputChunk(seq: seq, end: false, hasData: true) {
                case .chunk: passed += 1; seq += 1
                case .hold: seq += 1
                default: break
                }
            }
            #expect((credit.input?.held ?? 0) <= StreamFrames.initialCredit)
            #expect(passed <= granted)
            #expect(Int(seq) - passed == credit.input?.held)
        }
    }

    @Test func aProducerNeverGetsMoreThanItsReaderGranted() {
        // Random grants and sends: chunks passed on never exceed the initial window plus grants.
        var rng = SplitMix(seed: 42)
        var credit = StreamCredit(answers: true, input: false)
        var granted = UInt64(StreamFrames.initialCredit), passed: UInt64 = 0
        for _ in 0..<2_000 {
            if rng.next() % 3 == 0 {
                let n = rng.next() % 5
                if credit.grantAnswer(n) == nil { granted += n }
            } else if credit.answerChunk(seq: credit.seq, id: 1) == nil {
                passed += 1
            }
            #expect(passed <= granted)
            #expect(UInt64(credit.credit) == granted - passed)
        }
    }
}

/// A small seeded generator, for tests that want the same sequence every run.
struct SplitMix: RandomNumberGenerator {
    var state: UInt64
    init(seed: UInt64) { state = seed }
    mutating func next() -> UInt64 {
        state &+= 0x9E37_79B9_7F4A_7C15
        var z = state
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return z ^ (z >> 31)
    }
}
