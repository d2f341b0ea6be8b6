/// How many activations (SPEC §16) are spawned in one turn of the event loop. A spawn is done on
/// the loop and costs a few milliseconds (the fork server's answer, the worker's sockets and
/// folders); a burst of first calls to hundreds of inactive plugins, read in one go, would spawn
/// them all in one turn and leave every other connection unread meanwhile (`status`, calls to
/// running plugins: seconds at 800). At most `perTurn` are spawned at once; the others wait, in
/// the order they came, for the next turn, which the driver runs a moment later, after the loop has
/// served what else came.
package struct SpawnPace: Sendable, Equatable {
    package let perTurn: Int
    /// Spawned since the turn began.
    package private(set) var spawned = 0
    /// Waiting for a turn, oldest first, each once.
    package private(set) var backlog: [String] = []

    package init(perTurn: Int = 4) {
        self.perTurn = max(1, perTurn)
    }

    /// Whether `plugin`'s activation is spawned now; if not, it waits for a turn (`turn`). One
    /// already waiting is not added twice.
    package mutating func admit(_ plugin: String) -> Bool {
        if backlog.isEmpty, spawned < perTurn {
            spawned += 1
            return true
        }
        if !backlog.contains(plugin) { backlog.append(plugin) }
        return false
    }

    /// A new turn: the activations to spawn in it, oldest first (counted in it).
    package mutating func turn() -> [String] {
        let now = Array(backlog.prefix(perTurn))
        backlog.removeFirst(now.count)
        spawned = now.count
        return now
    }

    /// Whether the driver must run another turn: something waits, or this turn spawned (the next
    /// turn's count starts from nothing only after it).
    package var wantsTurn: Bool { !backlog.isEmpty || spawned > 0 }
}
