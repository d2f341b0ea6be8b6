import Testing
import SupervisorCore

/// How long an upgrade waits for quiet (SPEC §14: calls in flight are answered), as a value.
@Suite struct QuietWaitTests {
    static let now = Instant(nanoseconds: 1_000_000_000_000)
    static func call(in ms: Int) -> QuietWait.InFlight { .call(deadline: now.adding(milliseconds: ms)) }

    @Test func nothingInFlightWaitsTheShortWait() {
        #expect(QuietWait.milliseconds([], now: Self.now) == QuietWait.quietMs)
    }

    @Test func callsInFlightAreWaitedForUntilTheLatestDeadline() {
        #expect(QuietWait.milliseconds([Self.call(in: 3_000), Self.call(in: 7_500), Self.call(in: 100)], now: Self.now) == 7_500)
    }

    @Test func theWaitForCallsIsBoundedBothWays() {
        #expect(QuietWait.milliseconds([Self.call(in: 500)], now: Self.now) == QuietWait.quietMs, "at least the short wait")
        #expect(QuietWait.milliseconds([Self.call(in: -5_000)], now: Self.now) == QuietWait.quietMs, "a deadline already past")
        #expect(QuietWait.milliseconds([Self.call(in: 600_000)], now: Self.now) == QuietWait.callsMs, "at most the calls' wait")
        #expect(QuietWait.milliseconds([.call(deadline: .never)], now: Self.now) == QuietWait.callsMs, "a call without a deadline")
    }

    @Test func anythingButCallsGetsTheShortWait() {
        #expect(QuietWait.milliseconds([Self.call(in: 10_000), .other], now: Self.now) == QuietWait.quietMs)
        #expect(QuietWait.milliseconds([.other, Self.call(in: 10_000)], now: Self.now) == QuietWait.quietMs)
    }
}
