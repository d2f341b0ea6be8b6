/// What one worker has shown of which calls its plugin may have started, and whether its word still
/// counts (SPEC §15). Kept by the supervisor for each worker, beside the worker's `CallTable`.
///
/// The worker reports a watermark `taken` (on frames it sends anyway, and in a shared page read
/// after its death): every call with id <= `taken` may have been handed to the plugin, none above
/// it has. Ids increase in send order, so one number says it for every call. The worker is not
/// trusted to be honest, only to be caught:
/// - a report lower than one accepted before un-takes calls: a lie, recorded, and from then on the
///   worker's word counts for nothing (only the kernel's witness of unread frames does);
/// - a report above the highest id sent claims calls it never got: it is clamped to that id ("every
///   call sent may have started", the safe side);
/// so a report can make more calls look started (fewer replays, more `started: true` failures),
/// never fewer than an earlier report said.
package struct TakenWatermark: Sendable, Equatable {
    /// Whether the worker's reports count, with what they said.
    package enum State: Sendable, Equatable {
        /// Calls with id <= `taken` may have started; those above it have not.
        case trusting(taken: UInt64)
        /// It reported less than it had before: only the kernel's witness counts from now on.
        case distrusting(Lie)
    }

    /// A report that went back: what it said, and what had been accepted before it.
    package struct Lie: Sendable, Equatable, CustomStringConvertible {
        package var claimed: UInt64
        package var earlier: UInt64

        package init(claimed: UInt64, earlier: UInt64) {
            self.claimed = claimed
            self.earlier = earlier
        }

        package var description: String { "its watermark went back from \(earlier) to \(claimed)" }
    }

    /// What a report did, for the driver to log (a clamp or a lie is worth a warning).
    package enum Report: Sendable, Equatable {
        /// Taken as it came (it may equal the one before).
        case accepted(UInt64)
        /// It claimed calls never sent: held at the highest id sent.
        case clamped(claimed: UInt64, to: UInt64)
        /// It went back: the worker is not trusted from now on.
        case lie(Lie)
        /// The worker is not trusted: the report changes nothing.
        case ignored
    }

    package private(set) var state: State = .trusting(taken: 0)
    /// The highest id of a call sent to this worker (0: none yet).
    package private(set) var highestSent: UInt64 = 0

    /// A new worker: nothing sent, nothing taken, trusted.
    package init() {}

    /// A worker taken over in an upgrade in place, as the previous binary left it: ids up to
    /// `highestSent` sent, its word trusted up to `taken` (never above what was sent). Its next
    /// report must not go below `taken`, as if no exec had come between.
    package init(resumedAt highestSent: UInt64, taken: UInt64) {
        self.highestSent = highestSent
        state = .trusting(taken: min(taken, highestSent))
    }

    package var isTrusted: Bool { if case .trusting = state { return true } else { return false } }

    /// The accepted watermark; nil once the worker lied.
    package var taken: UInt64? { if case .trusting(let taken) = state { return taken } else { return nil } }

    /// A call goes to the worker under `id`: recorded before its frame is written, so that no honest
    /// report can name an id not recorded yet.
    package mutating func sent(_ id: UInt64) {
        highestSent = max(highestSent, id)
    }

    /// The worker says calls up to `claim` may have been handed to its plugin.
    @discardableResult
    package mutating func reported(_ claim: UInt64) -> Report {
        guard case .trusting(let taken) = state else { return .ignored }
        if claim < taken {
            let lie = Lie(claimed: claim, earlier: taken)
            state = .distrusting(lie)
            return .lie(lie)
        }
        if claim > highestSent {
            state = .trusting(taken: highestSent)
            return .clamped(claimed: claim, to: highestSent)
        }
        state = .trusting(taken: claim)
        return .accepted(claim)
    }

    /// Whether the plugin may have started the call sent under `id`, given `unread`: the ids of call
    /// frames the supervisor read back from the dead worker's socket (the kernel witnesses the
    /// worker never read them). Not started: unread, or above the watermark of a trusted worker.
    package func mayHaveStarted(_ id: UInt64, unread: Set<UInt64>) -> Bool {
        if unread.contains(id) { return false }
        guard case .trusting(let taken) = state else { return true }
        return id <= taken
    }
}
