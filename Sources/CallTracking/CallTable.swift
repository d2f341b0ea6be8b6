/// What a call table needs of an entry: when it is due, and whether it is a call (a forwarded
/// `call` or `open`) rather than the caller's own business (an event, an unlink), which a drain
/// does not wait for.
package protocol InFlightEntry {
    var deadline: Instant { get }
    var isCall: Bool { get }
}

extension InFlightEntry {
    package var isCall: Bool { true }
}

/// The calls one caller sent and has not had answered, by id: the one caller's table of the
/// product, kept by the supervisor for each worker it calls, by a worker for its plugin's calls
/// over peer links, and by a program for its calls over a direct link. Each entry leaves exactly
/// once: answered (`settle`), past its deadline (`expire`), given up by its caller (`settle`,
/// then a cancel), or failed with its callee (`removeAll`).
///
/// Ids are the table's own (`add`, `takeID`: new and increasing while the table lives) or the
/// caller's (`insert(_:id:)`: a plugin's own call ids, or ids taken without the table's lock).
/// `earliest` is a lower bound of the deadlines: no scan of the table until it has passed, so a
/// call costs one dictionary insert and one removal.
package struct CallTable<Entry: InFlightEntry> {
    @usableFromInline package var entries: [UInt64: Entry] = [:]
    /// The id the next request gets.
    @usableFromInline package private(set) var nextID: UInt64 = 1
    /// No entry's deadline is earlier (one may be later: the earliest may have been answered).
    @usableFromInline package private(set) var earliest: Instant = .never

    package init() {}

    @inlinable package var isEmpty: Bool { entries.isEmpty }
    @inlinable package var count: Int { entries.count }

    /// Allocates the next id (for a request that gets no entry, a ping, it is used up all the same).
    @inlinable
    package mutating func takeID() -> UInt64 {
        defer { nextID += 1 }
        return nextID
    }

    /// Ids from `nextID` on are new (a table taken over from a previous supervisor binary, whose
    /// worker has seen the ids before it).
    package mutating func resume(nextID: UInt64) {
        self.nextID = max(self.nextID, nextID)
    }

    /// Whether `id` was ever given out by `takeID` (a late answer to it is expected; an answer to
    /// an id never given out is not).
    package func wasIssued(_ id: UInt64) -> Bool { id >= 1 && id < nextID }

    /// Adds `entry` under a new id, which it returns.
    @inlinable
    package mutating func add(_ entry: Entry) -> UInt64 {
        let id = takeID()
        insert(entry, id: id)
        return id
    }

    /// Adds `entry` under `id` (taken with `takeID`, or the caller's own); an entry already there
    /// under that id is replaced.
    @inlinable
    package mutating func insert(_ entry: Entry, id: UInt64) {
        entries[id] = entry
        if entry.deadline < earliest { earliest = entry.deadline }
    }

    @inlinable
    package func contains(_ id: UInt64) -> Bool { entries[id] != nil }

    /// The entry under `id`. Its deadline may move later (a stream's idle timeout moving with each
    /// chunk) and need nothing more: `earliest` stays a lower bound.
    @inlinable
    package subscript(id: UInt64) -> Entry? {
        get { entries[id] }
        _modify { yield &entries[id] }
    }

    /// The answer to `id` came (or its caller gave it up): its entry leaves; nil if it had left.
    @inlinable
    package mutating func settle(_ id: UInt64) -> Entry? {
        entries.removeValue(forKey: id)
    }

    /// The entries past their deadline at `now`, oldest id first, removed; and the earliest
    /// deadline among those left (nil: none left). Before `earliest`, nothing is looked at.
    package mutating func expire(now: Instant) -> (expired: [(id: UInt64, entry: Entry)], next: Instant?) {
        guard now >= earliest else { return ([], earliest == .never ? nil : earliest) }
        var expired: [(id: UInt64, entry: Entry)] = []
        var next = Instant.never
        for (id, entry) in entries {
            if entry.deadline <= now {
                expired.append((id, entry))
            } else if entry.deadline < next {
                next = entry.deadline
            }
        }
        expired.sort { $0.id < $1.id }
        for (id, _) in expired { entries[id] = nil }
        earliest = next
        return (expired, next == .never ? nil : next)
    }

    /// Every entry, oldest id first, removed (its callee ended).
    package mutating func removeAll() -> [(id: UInt64, entry: Entry)] {
        let all = entries.sorted { $0.key < $1.key }.map { (id: $0.key, entry: $0.value) }
        entries = [:]
        earliest = .never
        return all
    }

    /// Calls (not events, not unlinks) in the table.
    package var callCount: Int { entries.values.reduce(0) { $0 + ($1.isCall ? 1 : 0) } }
    package var hasCalls: Bool { entries.values.contains { $0.isCall } }

    /// Every entry, in no order.
    package var values: Dictionary<UInt64, Entry>.Values { entries.values }
}
