import Testing
import SupervisorCore

/// Calls sent again after a direct link ended with its worker (Replay/LinkReplay.swift): the fate
/// each gets from the worker's mark for the link, the words a worker's links get, and what a
/// caller keeps of its ended links, without a process.
@Suite struct LinkReplayTests {
    static let now = ReplayTests.now
    static let rules = ReplayTests.replay
    static func ended(mark: UInt64?) -> EndedLink { EndedLink(callee: "p", mark: mark, crash: "killed by SIGKILL", rules: rules) }
    static func call(_ method: String, deadline: Instant = ReplayTests.later) -> LinkedCall { LinkedCall(method: method, deadline: deadline) }

    @Test func aCallAboveTheMarkIsReplayedOnceCounted() {
        let action = Self.rules.decide(afterLink: Self.ended(mark: 4), id: 5, Self.call("put"), successor: .comes, now: Self.now)
        var expected = Self.call("put")
        expected.crashes = 1
        #expect(action == .replay(expected))
    }

    @Test func aCallAtOrBelowTheMarkMayHaveStarted() {
        // Not idempotent: fails as started, naming the crash.
        let put = Self.rules.decide(afterLink: Self.ended(mark: 4), id: 4, Self.call("put"), successor: .comes, now: Self.now)
        guard case .fail(_, let error, let started) = put else { Issue.record("\(put)"); return }
        #expect(started && error.code == "unavailable" && error.message.contains("killed by SIGKILL") && error.message.contains("put is not idempotent"))
        // Idempotent: retried once, counted.
        let get = Self.rules.decide(afterLink: Self.ended(mark: 4), id: 2, Self.call("getUser"), successor: .comes, now: Self.now)
        var retried = Self.call("getUser")
        retried.retries = 1
        retried.crashes = 1
        #expect(get == .retry(retried))
    }

    @Test func withoutAMarkOrARecordEveryCallMayHaveStarted() {
        for ended in [Self.ended(mark: nil), nil] {
            let action = Self.rules.decide(afterLink: ended, id: 1_000, Self.call("put"), successor: .comes, now: Self.now)
            guard case .fail(_, _, let started) = action else { Issue.record("\(action)"); continue }
            #expect(started)
        }
        // No record (the link broke while its worker ran, or was never the caller's): the error
        // does not say a worker ended; an idempotent call is retried, then fails naming its retries.
        let put = Self.rules.decide(afterLink: nil, id: 1, Self.call("put"), successor: .comes, now: Self.now)
        guard case .fail(_, let error, true) = put else { Issue.record("\(put)"); return }
        #expect(error.message == "the link to p ended with put in flight and no crash of its worker is known: its plugin may have started it; "
                + "it is not run again: put is not idempotent (neither the manifest's `idempotent` nor the plugin's own declaration names it)")
        var again = Self.call("getUser")
        again.retries = 1
        again.crashes = 1
        #expect(Self.rules.decide(afterLink: nil, id: 1, Self.call("getUser"), successor: .comes, now: Self.now) == .retry(again))
        let spent = Self.rules.decide(afterLink: nil, id: 1, again, successor: .comes, now: Self.now)
        guard case .fail(_, let retried, true) = spent else { Issue.record("\(spent)"); return }
        #expect(retried.message.hasSuffix("it is not run again: retried 1 time already (limits.retries: 1)"), "\(retried.message)")
    }

    @Test func aPluginThatWillNotComeBackOrALateCallFails() {
        let never = Self.rules.decide(afterLink: Self.ended(mark: 0), id: 1, Self.call("put"), successor: .never(reason: "it is stopped"), now: Self.now)
        guard case .fail(_, let error, let started) = never else { Issue.record("\(never)"); return }
        #expect(!started && error.message.contains("no worker follows it: it is stopped"))
        let late = Self.rules.decide(afterLink: Self.ended(mark: 0), id: 1, Self.call("put", deadline: Self.now), successor: .comes, now: Self.now)
        guard case .fail(_, let timeout, _) = late else { Issue.record("\(late)"); return }
        #expect(timeout.code == "timeout")
    }

    @Test func aCallerKeepsItsLastEndedLinks() {
        var links = EndedLinks()
        for number in 1...UInt64(EndedLinks.capacity + 5) { links.record(number, Self.ended(mark: number)) }
        #expect(links[1] == nil && links[5] == nil, "the oldest are let go")
        #expect(links[6]?.mark == 6 && links[UInt64(EndedLinks.capacity + 5)]?.mark == UInt64(EndedLinks.capacity + 5))
        // Recorded again (the same link): kept once, with what came last, in its place.
        links.record(6, Self.ended(mark: 60))
        #expect(links[6]?.mark == 60)
        links.record(1_000, Self.ended(mark: 1))
        #expect(links[6] == nil && links[7]?.mark == 7 && links[1_000]?.mark == 1)
        // A call names a link: only this caller's link to that plugin counts.
        #expect(links.ended(7, to: "p")?.mark == 7)
        #expect(links.ended(7, to: "q") == nil && links.ended(6, to: "p") == nil && links.ended(99_999, to: "p") == nil)
    }

    @Test("words links already hold (taken over in an upgrade) are given to no other link; the words below them are")
    func wordsClaimedAfterAnUpgrade() {
        var slots = LinkMarkSlots()
        slots.claim(5)
        slots.claim(2)
        slots.claim(0)
        slots.claim(LinkMarkSlots.words)
        var taken: [Int] = []
        while let slot = slots.take() { taken.append(slot) }
        #expect(taken.count == LinkMarkSlots.words - 3 && !taken.contains(5) && !taken.contains(2) && Set(taken).count == taken.count)
        #expect(Set(taken) == Set(1..<LinkMarkSlots.words).subtracting([2, 5]))
    }

    @Test func aWorkersLinksGetWordsOneToFiveHundredElevenEachOnce() {
        var slots = LinkMarkSlots()
        var taken: [Int] = []
        while let slot = slots.take() { taken.append(slot) }
        #expect(taken == Array(1..<LinkMarkSlots.words), "word 0 is the requests' mark")
        // Given back: given again; a word never given, or given back twice, is not.
        slots.give(7)
        slots.give(7)
        slots.give(0)
        slots.give(LinkMarkSlots.words)
        #expect(slots.take() == 7 && slots.take() == nil)
    }
}
