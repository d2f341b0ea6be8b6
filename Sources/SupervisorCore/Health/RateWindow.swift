/// A one-second window that admits at most `limit` items (and, with `byteLimit`, at most that
/// many bytes of them), counts the rest as dropped, and calls more than `floodLimit` in a window a
/// flood. Used for a worker's `log` messages and for the lines of its stdout and stderr.
package struct RateWindow {
    package let limit: Int
    package let floodLimit: Int
    package let byteLimit: Int
    private var start = Instant.zero
    private var count = 0
    private var bytes = 0
    private var dropped = 0

    package init(limit: Int, floodLimit: Int = .max, byteLimit: Int = .max) {
        self.limit = limit
        self.floodLimit = floodLimit
        self.byteLimit = byteLimit
    }

    package enum Verdict: Equatable {
        /// Pass it on; `droppedBefore` items were dropped in the window that just ended (report them).
        case admit(droppedBefore: Int)
        /// Drop it; `droppedBefore` as for `admit` (reported even when nothing is admitted any more).
        case drop(droppedBefore: Int)
        case flood
    }

    /// One item of `size` bytes (an item larger than `byteLimit` is never admitted).
    package mutating func admit(now: Instant, size: Int = 0) -> Verdict {
        var droppedBefore = 0
        if now.nanoseconds(since: start) >= 1_000_000_000 {
            droppedBefore = dropped
            start = now
            count = 0
            bytes = 0
            dropped = 0
        }
        count += 1
        if count > floodLimit { return .flood }
        if count > limit || size > byteLimit - bytes {
            dropped += 1
            return .drop(droppedBefore: droppedBefore)
        }
        bytes += size
        return .admit(droppedBefore: droppedBefore)
    }

    /// Items are being dropped in the current window, which ends at `windowEnd`.
    package var isDropping: Bool { dropped > 0 }
    /// Items dropped in the current window so far (1: the drop just counted was its first).
    package var droppedInWindow: Int { dropped }
    package var windowEnd: Instant { start.adding(nanoseconds: 1_000_000_000) }

    /// Items the window that ended by `now` dropped, taken (0 while the window goes on): told when
    /// it ends even if nothing comes after it.
    package mutating func takeDroppedIfEnded(now: Instant) -> Int {
        guard now.nanoseconds(since: start) >= 1_000_000_000 else { return 0 }
        return takeDropped()
    }

    /// Items dropped in the current window (reported when the stream ends), and resets the count.
    package mutating func takeDropped() -> Int {
        defer { dropped = 0 }
        return dropped
    }
}
