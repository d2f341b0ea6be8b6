import Testing
import SupervisorCore

/// The in-flight table (Calls/CallTable.swift): ids, deadlines, and that each entry leaves once.
@Suite struct CallTableTests {
    struct Entry: InFlightEntry, Equatable {
        var name: String
        var deadline: Instant
        var isCall = true
    }

    static let t0 = Instant(nanoseconds: 5_000_000_000)

    static func entry(_ name: String, afterMs ms: Int = 1_000, isCall: Bool = true) -> Entry {
        Entry(name: name, deadline: t0.adding(milliseconds: ms), isCall: isCall)
    }

    @Test func idsAreNewAndIncreasing() {
        var table = CallTable<Entry>()
        let a = table.add(Self.entry("a")), b = table.add(Self.entry("b"))
        let ping = table.takeID()
        let c = table.add(Self.entry("c"))
        #expect([a, b, ping, c] == [1, 2, 3, 4])
        #expect(table.count == 3, "a taken id with no entry adds none")
    }

    @Test func settleRemovesOnce() {
        var table = CallTable<Entry>()
        let id = table.add(Self.entry("a"))
        #expect(table.settle(id)?.name == "a")
        #expect(table.settle(id) == nil, "an entry leaves once")
        #expect(table.isEmpty)
    }

    @Test func expireTakesWhatIsDueOldestFirstAndNamesTheNextDeadline() {
        var table = CallTable<Entry>()
        _ = table.add(Self.entry("late", afterMs: 3_000))
        _ = table.add(Self.entry("due2", afterMs: 200))
        _ = table.add(Self.entry("due1", afterMs: 100))
        _ = table.add(Self.entry("soon", afterMs: 1_500))
        let (expired, next) = table.expire(now: Self.t0.adding(milliseconds: 500))
        #expect(expired.map(\.entry.name) == ["due2", "due1"], "by id, not by deadline")
        #expect(expired.map(\.id) == [2, 3])
        #expect(next == Self.t0.adding(milliseconds: 1_500))
        #expect(table.count == 2)
    }

    @Test func aDeadlineExactlyNowIsDue() {
        var table = CallTable<Entry>()
        _ = table.add(Self.entry("a", afterMs: 100))
        #expect(table.expire(now: Self.t0.adding(milliseconds: 100)).expired.count == 1)
    }

    @Test func nothingDueLeavesTheTableAlone() {
        var table = CallTable<Entry>()
        _ = table.add(Self.entry("a"))
        let (expired, next) = table.expire(now: Self.t0)
        #expect(expired.isEmpty && next == Self.t0.adding(milliseconds: 1_000) && table.count == 1)
        var empty = CallTable<Entry>()
        #expect(empty.expire(now: Self.t0).next == nil)
    }

    @Test func removeAllIsInIdOrder() {
        var table = CallTable<Entry>()
        for name in ["a", "b", "c"] { _ = table.add(Self.entry(name)) }
        _ = table.settle(2)
        #expect(table.removeAll().map(\.entry.name) == ["a", "c"])
        #expect(table.isEmpty)
        #expect(table.add(Self.entry("d")) == 4, "ids are not reused after the table empties")
    }

    @Test func onlyCallsCountAsInside() {
        var table = CallTable<Entry>()
        _ = table.add(Self.entry("event", isCall: false))
        #expect(!table.hasCalls && table.callCount == 0)
        _ = table.add(Self.entry("call"))
        #expect(table.hasCalls && table.callCount == 1 && table.count == 2)
    }

    @Test func wasIssuedTellsLateAnswersFromForgedOnes() {
        var table = CallTable<Entry>()
        let id = table.add(Self.entry("a"))
        _ = table.settle(id)
        #expect(table.wasIssued(id), "a late answer to an id given out is expected")
        #expect(!table.wasIssued(id + 1), "an answer to an id never given out is not")
        #expect(!table.wasIssued(0))
    }

    @Test func resumedIdsNeverGoBack() {
        var table = CallTable<Entry>()
        table.resume(nextID: 40)
        #expect(table.takeID() == 40)
        table.resume(nextID: 10)
        #expect(table.takeID() == 41, "an older next id does not rewind the table")
    }

    @Test func aStreamMovesItsDeadlineInPlace() {
        var table = CallTable<Entry>()
        let id = table.add(Self.entry("s", afterMs: 100))
        table[id]?.deadline = Self.t0.adding(milliseconds: 900)
        #expect(table.expire(now: Self.t0.adding(milliseconds: 500)).expired.isEmpty)
        #expect(table.earliest == Self.t0.adding(milliseconds: 900), "the scan raised the lower bound to what is left")
    }

    @Test func nothingIsScannedBeforeTheEarliestDeadline() {
        var table = CallTable<Entry>()
        let id = table.add(Self.entry("a", afterMs: 100))
        _ = table.add(Self.entry("b", afterMs: 800))
        _ = table.settle(id)
        #expect(table.earliest == Self.t0.adding(milliseconds: 100), "a lower bound: the earliest call may have been answered")
        let early = table.expire(now: Self.t0.adding(milliseconds: 50))
        #expect(early.expired.isEmpty && early.next == Self.t0.adding(milliseconds: 100))
        let later = table.expire(now: Self.t0.adding(milliseconds: 200))
        #expect(later.expired.isEmpty && later.next == Self.t0.adding(milliseconds: 800))
        #expect(table.expire(now: Self.t0.adding(milliseconds: 800)).expired.map(\.entry.name) == ["b"])
        #expect(table.earliest == .never && table.expire(now: .never).next == nil)
    }

    @Test func aCallersOwnIdsAreKeptAsGiven() {
        // A worker keeps its plugin's calls under the plugin's ids; a program takes ids without the lock.
        var table = CallTable<Entry>()
        table.insert(Self.entry("p", afterMs: 300), id: 1 << 40)
        table.insert(Self.entry("q", afterMs: 200), id: 7)
        #expect(table.contains(1 << 40) && table.contains(7) && table.count == 2)
        #expect(table.earliest == Self.t0.adding(milliseconds: 200))
        #expect(table.removeAll().map(\.id) == [7, 1 << 40])
        #expect(table.earliest == .never)
    }

    @Test func monotonicReadingsConvertBothWays() {
        #expect(Instant(monotonic: 42).monotonic == 42)
        #expect(Instant(monotonic: -5) == .zero)
        #expect(Instant.never.monotonic == .max)
    }
}
