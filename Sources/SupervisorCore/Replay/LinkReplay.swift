import PluginProtocol

/// Calls that were in flight on a direct link (a program's) when the worker at its other end died
/// (SPEC §15). The caller holds them, not the supervisor; when the link ends by itself the caller
/// sends each again through the supervisor, naming the link and the call's id on it
/// (`"afterLink": {"link": N, "id": X}`), and the supervisor decides its fate here, with the same
/// rules as for the calls the worker held (`CrashReplay`):
/// - the worker kept a mark for the link in its taken page (`PeerLinkOrder.markSlot`): the highest
///   id on it that it handed to its plugin. A call above the mark never started: it is replayed. At
///   or below it, or with no mark, it may have started: retried if its method is idempotent (within
///   `limits.retries`), else it fails with `unavailable` and `started: true`;
/// - the mark is read once the worker is dead, before its caller can see the link end (the
///   supervisor holds a duplicate of the worker's end until then), so every such call finds it.
/// Nothing is sent per call on the normal path: the worker stores one word per call it hands over.
package struct EndedLink: Sendable, Equatable {
    /// The plugin whose worker served the link.
    package var callee: String
    /// The highest id on the link that the worker handed to its plugin; nil when there is no mark
    /// (the worker keeps none, or the link had no word): every call counts as started.
    package var mark: UInt64?
    /// How the worker ended, as the log says it (`killed by SIGKILL`).
    package var crash: String
    /// The plugin's rules as that worker had them (its manifest, the methods its `hello` flagged).
    package var rules: CrashReplay

    package init(callee: String, mark: UInt64?, crash: String, rules: CrashReplay) {
        self.callee = callee
        self.mark = mark
        self.crash = crash
        self.rules = rules
    }

    /// Whether the call with `id` on the link may have been handed to the plugin.
    package func mayHaveStarted(_ id: UInt64) -> Bool {
        guard let mark else { return true }
        return id <= mark
    }
}

/// The direct links of one caller that ended with their worker, by link number, until the caller
/// has sent their calls again: the last `capacity` kept (a caller sends them at once, on seeing its
/// link end; one that waits longer finds nothing, and its calls count as started).
package struct EndedLinks: Sendable {
    package static let capacity = 32
    private var order: [UInt64] = []
    private var links: [UInt64: EndedLink] = [:]

    package init() {}

    package mutating func record(_ number: UInt64, _ link: EndedLink) {
        if links.updateValue(link, forKey: number) == nil { order.append(number) }
        while order.count > Self.capacity { links[order.removeFirst()] = nil }
    }

    package subscript(number: UInt64) -> EndedLink? { links[number] }

    /// What counts for a call to `callee` naming link `number`: the record of that link if it was
    /// this caller's to that plugin; nil otherwise (another plugin's link, one let go, or a number
    /// never given to this caller): the call may have started.
    package func ended(_ number: UInt64, to callee: String) -> EndedLink? {
        guard let link = links[number], link.callee == callee else { return nil }
        return link
    }
}

/// The words of one worker's taken page that its links' marks may use (word 0 is its requests'
/// mark). Given to a link when it is made, taken back when the link is settled while the worker
/// lives; none left: the link gets no word (its calls count as started after a crash).
package struct LinkMarkSlots: Sendable, Equatable {
    /// Words in the page (4096 bytes of 8).
    package static let words = 512
    private var next = 1
    private var freed: [Int] = []

    package init() {}

    package mutating func take() -> Int? {
        if let slot = freed.popLast() { return slot }
        guard next < Self.words else { return nil }
        defer { next += 1 }
        return next
    }

    /// A word a link already has (one taken over in an upgrade in place): given to no other.
    package mutating func claim(_ slot: Int) {
        guard slot > 0, slot < Self.words else { return }
        if slot >= next {
            freed += Array(next..<slot)
            next = slot + 1
        } else {
            freed.removeAll { $0 == slot }
        }
    }

    /// A word given back (its link settled while the worker lives), for the next link. The worker
    /// clears a word when a link that names it arrives, before it can read any call of it; a word
    /// it did not clear (the worker died first) holds a higher mark, which only makes calls look
    /// started (the safe side).
    package mutating func give(_ slot: Int) {
        guard slot > 0, slot < next, !freed.contains(slot) else { return }
        freed.append(slot)
    }
}

/// What becomes of a call sent again after its direct link ended (`EndedLink`): its method, its
/// deadline, and the attempts it now counts.
package struct LinkedCall: ReplayableCall, Sendable, Equatable {
    package var method: String
    package var deadline: Instant
    package var retries = 0
    package var crashes = 0
    package var callerIsGone: Bool { false }

    package init(method: String, deadline: Instant) {
        self.method = method
        self.deadline = deadline
    }
}

extension CrashReplay {
    /// The fate of a call sent again after link `number` ended, under id `id` there: `ended`, what
    /// the supervisor recorded when the link's worker died (nil: it knows of no such end, so the
    /// call may have started); `successor`, whether the plugin comes back.
    package func decide(afterLink ended: EndedLink?, id: UInt64, _ call: LinkedCall, successor: Successor, now: Instant) -> Action<LinkedCall> {
        guard let ended else {
            // No crash of its worker is known behind the link (it broke, or was never this
            // caller's): the call may have started, and the error says so, not that a worker ended.
            let action = decide(call, started: true, crash: "its link ended", successor: successor, now: now)
            guard case .fail(let failed, let error, true) = action, error.code == ErrorCode.unavailable.rawValue, successor == .comes else { return action }
            let method = call.method
            let why = idempotent.contains(method) ? retriedAlready(call.retries) : notIdempotent(method)
            return .fail(failed, ErrorBody(.unavailable, "the link to \(plugin) ended with \(method) in flight and no crash of its worker is known: "
                                                      + "its plugin may have started it; it is not run again: \(why)"), started: true)
        }
        return decide(call, started: ended.mayHaveStarted(id), crash: ended.crash, successor: successor, now: now)
    }
}
