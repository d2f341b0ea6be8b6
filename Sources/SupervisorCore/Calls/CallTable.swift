/// What a call table needs of an entry: when it is due, and whether it is a call (a forwarded
/// `call` or `open`) rather than the caller's own business (an event, an unlink), which a drain
/// does not wait for.
package protocol InFlightEntry {
    var deadline: Instant { get }
    var isCall: Bool { get }
}

/// The requests one side sent and has not had answered, by the id it gave them: a worker's in
/// the supervisor. Each entry leaves exactly once: answered (`settle`), past its deadline
/// (`expire`), given up by its caller (`settle`, then a cancel), or failed with its callee
/// (`removeAll`). It allocates the ids too, so an id is never reused while its table lives.
package struct CallTable<Entry: InFlightEntry> {
    @usableFromInline package var entries: [UInt64: Entry] = [:]
    /// The id the next request gets.
    @usableFromInline package private(set) var nextID: UInt64 = 1

    package init() {}

    package var isEmpty: Bool { entries.isEmpty }
    package var count: Int { entries.count }

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

    /// Whether `id` was ever given out (a late answer to it is expected; an answer to a later one is not).
    package func wasIssued(_ id: UInt64) -> Bool { id >= 1 && id < nextID }

    /// Adds `entry` under a new id, which it returns.
    @inlinable
    package mutating func add(_ entry: Entry) -> UInt64 {
        let id = takeID()
        entries[id] = entry
        return id
    }

    /// Adds `entry` under `id`, taken before with `takeID`.
    @inlinable
    package mutating func insert(_ entry: Entry, id: UInt64) {
        precondition(id < nextID, "call id \(id) was never taken")
        entries[id] = entry
    }

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
    /// deadline among those left.
    package mutating func expire(now: Instant) -> (expired: [(id: UInt64, entry: Entry)], next: Instant?) {
        var expired: [(id: UInt64, entry: Entry)] = []
        var next: Instant?
        for (id, entry) in entries {
            if entry.deadline <= now {
                expired.append((id, entry))
            } else if next.map({ entry.deadline < $0 }) ?? true {
                next = entry.deadline
            }
        }
        expired.sort { $0.id < $1.id }
        for (id, _) in expired { entries[id] = nil }
        return (expired, next)
    }

    /// The earliest deadline in the table.
    package var earliestDeadline: Instant? { entries.values.lazy.map(\.deadline).min() }

    /// Every entry, oldest id first, removed (its callee ended).
    package mutating func removeAll() -> [(id: UInt64, entry: Entry)] {
        let all = entries.sorted { $0.key < $1.key }.map { (id: $0.key, entry: $0.value) }
        entries = [:]
        return all
    }

    /// Calls (not events, not unlinks) in the table.
    package var callCount: Int { entries.values.reduce(0) { $0 + ($1.isCall ? 1 : 0) } }
    package var hasCalls: Bool { entries.values.contains { $0.isCall } }

    /// Every entry, in no order.
    package var values: Dictionary<UInt64, Entry>.Values { entries.values }
}
