import NIOCore
import SupervisorCore

extension Lifecycle {
    /// Spawns the worker that will serve `record` (its first, or the next after a stop or crash).
    /// An activation (SPEC §16) is paced (`SpawnPace`): a burst of first calls to many inactive
    /// plugins spawns a few a turn, and the loop serves what else came between turns. So is one
    /// that waited for a dependency being activated: the dependents of one inactive dependency,
    /// called at once, come due together as soon as its worker is spawned.
    func spawn(_ record: PluginRecord) {
        loop.preconditionInEventLoop()
        guard record.instance == nil, !isShuttingDown else { return }
        if Self.isPaced(record) {
            let now = spawnPace.admit(record.identifier)
            schedulePaceTurn()
            guard now else { return }
        }
        spawnNow(record)
    }

    /// The next turn, once the loop has polled its sockets and served what they brought (a task
    /// scheduled a moment on would not wait for that, `AfterPoll`): the activations that waited,
    /// oldest first, each still wanted.
    private func schedulePaceTurn() {
        guard spawnPace.wantsTurn else { return }
        paceTurns.request()
    }

    func paceTurn() {
        for id in spawnPace.turn() {
            // Still being activated (not removed, stopped, failed or started another way meanwhile).
            guard let record = table[id], Self.isPaced(record), record.instance == nil else { continue }
            spawnNow(record)
        }
        schedulePaceTurn()
    }

    /// An activation on its way to its first spawn: inactive, or waiting for its dependencies.
    private static func isPaced(_ record: PluginRecord) -> Bool {
        record.life.activating && (record.phase == .inactive || record.phase == .waiting)
    }
}
