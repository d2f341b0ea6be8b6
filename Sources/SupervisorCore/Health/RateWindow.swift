/// A one-second window that admits at most `limit` items, counts the rest as dropped, and calls
/// more than `floodLimit` in a window a flood. Used for a worker's `log` messages and for the lines
/// of its stdout and stderr.
package struct RateWindow {
    package let limit: Int
    package let floodLimit: Int
    private var start = Instant.zero
    private var count = 0
    private var dropped = 0

    package init(limit: Int, floodLimit: Int = .max) {
        self.limit = limit
        self.floodLimit = floodLimit
    }

    package enum Verdict: Equatable {
        /// Pass it on; `droppedBefore` items were dropped in the window that just ended (report them).
        case admit(droppedBefore: Int)
        case drop
        case flood
    }

    package mutating func admit(now: Instant) -> Verdict {
        var droppedBefore = 0
        if now.nanoseconds(since: start) >= 1_000_000_000 {
            droppedBefore = dropped
            start = now
            count = 0
            dropped = 0
        }
        count += 1
        if count > floodLimit { return .flood }
        if count > limit {
            dropped += 1
            return .drop
        }
        return .admit(droppedBefore: droppedBefore)
    }

    /// Items dropped in the current window (reported when the stream ends), and resets the count.
    package mutating func takeDropped() -> Int {
        defer { dropped = 0 }
        return dropped
    }
}
