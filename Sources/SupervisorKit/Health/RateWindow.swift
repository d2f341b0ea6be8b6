import NIOCore
import SupervisorCore

/// A one-second window that admits at most `limit` items, counts the rest as dropped, and calls
/// more than `floodLimit` in a window a flood. Used for a worker's `log` messages and for the lines
/// of its stdout and stderr.
struct RateWindow {
    let limit: Int
    let floodLimit: Int
    private var start = NIODeadline.uptimeNanoseconds(0)
    private var count = 0
    private var dropped = 0

    init(limit: Int, floodLimit: Int = .max) {
        self.limit = limit
        self.floodLimit = floodLimit
    }

    enum Verdict: Equatable {
        /// Pass it on; `droppedBefore` items were dropped in the window that just ended (report them).
        case admit(droppedBefore: Int)
        case drop
        case flood
    }

    mutating func admit(now: NIODeadline) -> Verdict {
        var droppedBefore = 0
        if now - start >= .seconds(1) {
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
    mutating func takeDropped() -> Int {
        defer { dropped = 0 }
        return dropped
    }
}
