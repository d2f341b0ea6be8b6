import PluginProtocol
import SupervisorCore
import Testing

/// Install and update requests a stop answers before the control socket closes
/// (Installing/UnansweredInstalls.swift), from values alone: each answered once, by its work or
/// by the stop, never both.
@Suite struct UnansweredInstallsTests {
    @Test func aRequestAnsweredByItsWorkIsNotAnsweredByTheStop() {
        var waiting = UnansweredInstalls<String>()
        let install = waiting.add("client 1, request 7", "the install of https://example.com/a.tar.gz")
        #expect(waiting.waits(install))
        #expect(waiting.take(install) == "client 1, request 7")
        // Answered: no longer waits, not taken again, and the stop has nothing to answer.
        #expect(!waiting.waits(install))
        #expect(waiting.take(install) == nil)
        #expect(waiting.takeAll().isEmpty)
        #expect(waiting.isEmpty)
    }

    @Test func theStopAnswersEachWaitingRequestOnceInTheOrderTheyCame() {
        var waiting = UnansweredInstalls<String>()
        let first = waiting.add("a", "the install of ./x.tar.gz")
        let update = waiting.add("b", "the update")
        let third = waiting.add("c", "the install of com.example.y")
        _ = waiting.take(third)
        let answers = waiting.takeAll()
        #expect(answers.map(\.0) == ["a", "b"])
        #expect(answers.allSatisfy { $0.1.code == ErrorCode.unavailable.rawValue })
        #expect(answers[0].1.message == "the supervisor stopped before the install of ./x.tar.gz ended (nothing changed)")
        // What its work brings back later finds it answered: dropped, never answered twice.
        #expect(!waiting.waits(first) && !waiting.waits(update))
        #expect(waiting.take(first) == nil && waiting.take(update) == nil)
        #expect(waiting.takeAll().isEmpty)
    }

    /// An update stopped halfway says which plugins it updated before the stop.
    @Test func anUpdateStoppedHalfwaySaysWhatItDid() {
        var waiting = UnansweredInstalls<Int>()
        let update = waiting.add(1, "the update")
        waiting.did("com.example.a 1.0.0 → 1.1.0", for: update)
        waiting.did("com.example.b 2.0.0 → 2.0.1", for: update)
        let answers = waiting.takeAll()
        #expect(answers.count == 1)
        #expect(answers[0].1.message
            == "the supervisor stopped before the update ended (done before it: com.example.a 1.0.0 → 1.1.0, com.example.b 2.0.0 → 2.0.1)")
        // A step told after the stop's answer changes nothing.
        waiting.did("com.example.c 1.0.0 → 2.0.0", for: update)
        #expect(waiting.isEmpty)
    }

    /// Tickets are not reused: a request added after others were answered has a ticket of its own.
    @Test func ticketsAreNeverReused() {
        var waiting = UnansweredInstalls<String>()
        var seen: Set<UInt64> = []
        for round in 0..<50 {
            let ticket = waiting.add("r\(round)", "the update")
            #expect(seen.insert(ticket).inserted)
            if round % 3 == 0 { _ = waiting.takeAll() } else { _ = waiting.take(ticket) }
        }
    }
}
