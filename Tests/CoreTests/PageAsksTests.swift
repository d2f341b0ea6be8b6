import Testing
import SupervisorCore

/// Which workers taken over in an upgrade are asked for their taken page at once
/// (Replay/PageAsks.swift): never more than the limit, each in turn, none asked twice or lost.
@Suite struct PageAsksTests {
    @Test func atMostTheLimitAreAskedAndTheRestInTurn() {
        var asks = PageAsks<Int>(limit: 3)
        let now = (0..<8).filter { asks.want($0) }
        #expect(now == [0, 1, 2])
        #expect(asks.waiting == 5)
        let afterOne = asks.ended(1), afterZero = asks.ended(0)
        #expect(afterOne == [3] && afterZero == [4])
        #expect(asks.asked == [2, 3, 4])
        // Asked twice, or an end twice: nothing changes.
        let again = [asks.want(3), asks.want(6)], endedTwice = asks.ended(1)
        #expect(again == [false, false] && endedTwice.isEmpty)
        #expect(asks.asked.count == 3 && asks.waiting == 3)
    }

    @Test func aWorkerThatEndsBeforeItsTurnIsPassedOver() {
        var asks = PageAsks<Int>(limit: 2)
        for worker in 0..<5 { _ = asks.want(worker) }
        // 2 and 3 end while waiting: their turns go to the next.
        let turns = [2, 3, 0, 1, 4].map { asks.ended($0) }
        #expect(turns == [[], [], [4], [], []])
        #expect(asks.asked.isEmpty && asks.waiting == 0)
        // Empty again, it asks at once.
        let atOnce = asks.want(9)
        #expect(atOnce)
    }

    /// 1,000 workers taken over, ends in a random order: each asked exactly once, never more than
    /// the limit at a time, all asked by the end.
    @Test func aThousandWorkersEachAskedOnceWithinTheLimit() {
        var generator = SystemRandomNumberGenerator()
        for _ in 0..<5 {
            var asks = PageAsks<Int>()
            var everAsked: [Int: Int] = [:]
            for worker in 0..<1_000 where asks.want(worker) { everAsked[worker, default: 0] += 1 }
            var ended: Set<Int> = []
            while !asks.asked.isEmpty || asks.waiting > 0 {
                #expect(asks.asked.count <= PageAsks<Int>.defaultLimit)
                // Now and then a waiting worker ends before its turn.
                let pick: Int
                if Bool.random(using: &generator), asks.waiting > 0 {
                    pick = (0..<1_000).filter { !ended.contains($0) && !asks.asked.contains($0) && everAsked[$0] == nil }.randomElement(using: &generator)!
                } else {
                    pick = asks.asked.randomElement(using: &generator)!
                }
                ended.insert(pick)
                for next in asks.ended(pick) {
                    #expect(!ended.contains(next))
                    everAsked[next, default: 0] += 1
                }
            }
            #expect(everAsked.values.allSatisfy { $0 == 1 })
            #expect(ended.count == 1_000)
        }
    }
}
