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
        var calls = OutgoingCalls<Int>()
        #expect(calls.refusal(caller: "a", adding: OutgoingCalls<Int>.bytesLimit) == nil)
        let refused = calls.refusal(caller: "a", adding: OutgoingCalls<Int>.bytesLimit + 1)
        #expect(refused?.code == "unavailable")
        #expect(refused?.message.hasPrefix("a has 0 MiB of requests in flight through the supervisor, and this one") == true)
        for id in 0..<UInt64(OutgoingCalls<Int>.countLimit) { calls.add(id, callee: 0, id: id, bytes: 1) }
        #expect(calls.refusal(caller: "a", adding: 1)?.message == "a has 65536 calls in flight through the supervisor, the most one plugin may; try again when some are answered")
        calls.remove(7)
        #expect(calls.refusal(caller: "a", adding: 1) == nil)
    }

    @Test func inputHeldForOneReaderIsBounded() {
        #expect(HeldInput.refusal(callee: "r", held: 0, adding: HeldInput.limit) == nil)
        #expect(HeldInput.refusal(callee: "r", held: HeldInput.limit - 10, adding: 10) == nil)
        let refused = HeldInput.refusal(callee: "r", held: HeldInput.limit - 10, adding: 11)
        #expect(refused?.code == "unavailable")
        #expect(refused?.message.hasPrefix("r has 255 MiB of stream input held for it") == true)
    }
}
