import Testing
import SupervisorCore

/// Activations spawned a few a turn of the loop (Starting/SpawnPace.swift).
@Suite struct SpawnPaceTests {
    @Test func aBurstIsSpawnedAFewATurnInOrder() {
        var pace = SpawnPace(perTurn: 4)
        let admitted = (0..<10).map { pace.admit("p\($0)") }
        #expect(admitted == [true, true, true, true] + Array(repeating: false, count: 6))
        // Asked again while waiting: once.
        let twice = pace.admit("p5")
        #expect(!twice && pace.backlog == ["p4", "p5", "p6", "p7", "p8", "p9"])
        #expect(pace.wantsTurn)
        let first = pace.turn()
        #expect(first == ["p4", "p5", "p6", "p7"])
        // A newcomer queues behind what waits, even with room left in the turn.
        let newcomer = pace.admit("p10")
        #expect(!newcomer)
        let second = pace.turn()
        #expect(second == ["p8", "p9", "p10"])
        #expect(pace.wantsTurn)
        // A turn with nothing waiting ends the pacing; the next burst starts fresh.
        let last = pace.turn()
        #expect(last.isEmpty && !pace.wantsTurn)
        let fresh = pace.admit("q")
        #expect(fresh && pace.spawned == 1)
    }
}
