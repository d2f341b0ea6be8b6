import Testing
import SupervisorCore

/// After a protocol violation nothing a worker sends counts (Workers/FrameGate.swift).
@Suite struct FrameGateTests {
    @Test func aNewWorkersFramesCount() {
        #expect(FrameGate().isOpen)
    }

    @Test func theFirstViolationClosesItForGood() {
        var gate = FrameGate()
        let first = gate.violated("not JSON")
        #expect(first, "the first violation kills the worker")
        #expect(!gate.isOpen)
        let second = gate.violated("a reply to an id never asked")
        #expect(!second, "a later one is not a second kill")
        #expect(gate.violation == "not JSON", "the worker ends with the first reason")
    }
}

/// Time as the core counts it (Time/Instant.swift).
@Suite struct InstantTests {
    @Test func arithmeticStaysOnTheClock() {
        let t = Instant(nanoseconds: 2_000_000_000)
        #expect(t.adding(milliseconds: 5).nanoseconds == 2_005_000_000)
        #expect((t - .seconds(3)) == .zero, "never before the clock's start")
        #expect((t + .milliseconds(1_500)).nanoseconds(since: t) == 1_500_000_000)
        #expect(t.nanoseconds(since: t + .seconds(1)) == -1_000_000_000)
    }

    @Test func durationsInNanoseconds() {
        #expect(Duration.milliseconds(250).nanoseconds == 250_000_000)
        #expect(Duration.seconds(2).nanoseconds == 2_000_000_000)
    }
}
