import Testing
import SupervisorCore

/// What the supervisor holds for one plugin's calls and streams (Routing/OutgoingCalls.swift).
@Suite struct OutgoingCallsTests {
    @Test func callsAreCountedAndWeighedUntilAnswered() {
        var calls = OutgoingCalls<String>()
        calls.add(1, callee: "b", id: 10, bytes: 100)
        calls.add(2, callee: "c", id: 11, bytes: 50)
        #expect(calls.count == 2 && calls.bytes == 150)
        #expect(calls[1]?.callee == "b" && calls[1]?.id == 10)
        // Sent again after its callee crashed: it replaces its first entry.
        calls.add(1, callee: "b", id: 12, bytes: 100)
        #expect(calls.count == 2 && calls.bytes == 150 && calls[1]?.id == 12)
        #expect(calls.remove(2)?.callee == "c")
        #expect(calls.remove(2) == nil)
        #expect(calls.bytes == 100)
        let all = calls.removeAll()
        #expect(all.count == 1 && all[1]?.id == 12)
        #expect(calls.isEmpty && calls.bytes == 0)
    }

    @Test func theNextCallPastEitherLimitIsRefused() {
        let limit = HeldBytes.limit(maxFrameBytes: 16 << 20)
        var calls = OutgoingCalls<Int>()
        // With nothing in flight, one request of any size goes (the frame limit bounds it).
        #expect(calls.refusal(caller: "a", adding: limit * 4, limit: limit) == nil)
        calls.add(1, callee: 0, id: 1, bytes: 1 << 20)
        #expect(calls.refusal(caller: "a", adding: limit - (1 << 20), limit: limit) == nil)
        let refused = calls.refusal(caller: "a", adding: limit - (1 << 20) + 1, limit: limit)
        #expect(refused?.code == "unavailable")
        #expect(refused?.message.hasPrefix("a has 1 MiB of requests in flight through the supervisor, and this one") == true)
        calls.remove(1)
        for id in 0..<UInt64(OutgoingCalls<Int>.countLimit) { calls.add(id, callee: 0, id: id, bytes: 1) }
        #expect(calls.refusal(caller: "a", adding: 1, limit: limit)?.message
                == "a has 65536 calls in flight through the supervisor, the most one worker may; try again when some are answered")
        calls.remove(7)
        #expect(calls.refusal(caller: "a", adding: 1, limit: limit) == nil)
    }

    /// Sixteen of the largest frames, 256 MiB at least.
    @Test func theLimitFollowsTheFrameLimit() {
        #expect(HeldBytes.limit(maxFrameBytes: 1 << 20) == 256 << 20)
        #expect(HeldBytes.limit(maxFrameBytes: 16 << 20) == 256 << 20)
        #expect(HeldBytes.limit(maxFrameBytes: 64 << 20) == 1 << 30)
    }

    @Test func inputHeldForOneReaderIsBounded() {
        let limit = 256 << 20
        #expect(HeldInput.refusal(holder: "r", held: 0, adding: limit * 2, limit: limit) == nil)
        #expect(HeldInput.refusal(holder: "r", held: limit - 10, adding: 10, limit: limit) == nil)
        let refused = HeldInput.refusal(holder: "r", held: limit - 10, adding: 11, limit: limit)
        #expect(refused?.code == "unavailable")
        #expect(refused?.message.hasPrefix("r has 255 MiB of stream input held for it") == true)
    }
}
