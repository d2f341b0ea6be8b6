import CLinuxSupport
import Foundation
import PluginProtocol
import Testing
@testable import PluginWorker

/// The moves of a worker's peer-link table (`LinkTable`), without sockets. (A move is a mutating
/// call: made first, then its answer checked, as `#expect` takes no mutating expression.)
@Suite struct LinkTableTests {
    final class Socket: Sendable {}
    typealias Table = LinkTable<Socket>

    static let ms: Int64 = 1_000_000

    /// A table with a caller's link (number 1) to `com.b`, whose timeout is 500 ms.
    static func caller() -> (Table, Socket) {
        var table = Table()
        let socket = Socket()
        let added = table.add(PeerLinkOrder(kind: .caller, peer: "com.b", link: 1, timeoutMs: 500), socket: socket)
        #expect(added)
        return (table, socket)
    }

    /// Sends call `id` over the table's link to `com.b` (it must take it).
    static func callOut(_ table: inout Table, _ id: UInt64, requestedMs: UInt64? = nil, now: Int64 = 0) throws -> (socket: Socket, wake: Bool) {
        let out = table.callOut(id, to: "com.b", requestedMs: requestedMs, now: now)
        return try #require(out)
    }

    @Test func aCallGoesOverTheLinkWithItsDeadline() throws {
        var (table, socket) = Self.caller()
        let out = try Self.callOut(&table, 7, now: 1_000)
        #expect(out.socket === socket)
        #expect(table.calls[7]?.deadline.monotonic == 1_000 + 500 * Self.ms)
        #expect(table.earliest == 1_000 + 500 * Self.ms)
        #expect(table.links[1]?.outstanding == 1)
        // Its own timeout wins; the same id twice, or another target, goes through the supervisor.
        _ = try Self.callOut(&table, 8, requestedMs: 20, now: 1_000)
        #expect(table.earliest == 1_000 + 20 * Self.ms)
        let again = table.callOut(7, to: "com.b", requestedMs: nil, now: 2_000)
        let other = table.callOut(9, to: "com.c", requestedMs: nil, now: 2_000)
        #expect(again == nil && other == nil)
    }

    @Test func aCallThatCouldNotBeWrittenIsTakenBackOnce() throws {
        var (table, _) = Self.caller()
        _ = try Self.callOut(&table, 7)
        let first = table.unsent(7), second = table.unsent(7)
        #expect(first && !second)
        #expect(table.links[1]?.outstanding == 0)
    }

    @Test func theLinksThreadIsWokenOnlyForAnEarlierDeadlineWhileItWaits() throws {
        var (table, _) = Self.caller()
        var polled: [Table.Polled] = []
        let idle = table.waiting(polled: &polled)
        #expect(idle == .max)
        #expect(polled.count == 1 && polled[0].isCaller && polled[0].number == 1)
        #expect(try Self.callOut(&table, 1, requestedMs: 100).wake)
        polled = []
        let planned = table.waiting(polled: &polled)
        #expect(planned == 100 * Self.ms)
        #expect(try Self.callOut(&table, 2, requestedMs: 200).wake == false)
        table.awake()
        #expect(try Self.callOut(&table, 3, requestedMs: 50).wake == false)
    }

    @Test func aReplySettlesItsCallOnceAndIsCounted() throws {
        var (table, _) = Self.caller()
        _ = try Self.callOut(&table, 7)
        _ = try Self.callOut(&table, 8)
        let otherLink = table.replied(7, on: 2, .ok, now: 10)
        let replied = table.replied(7, on: 1, .ok, now: 60_000)
        let late = table.replied(7, on: 1, .ok, now: 70_000)
        let error = table.replied(8, on: 1, .error, now: 40_000)
        #expect(!otherLink && replied && !late && error)
        #expect(table.links[1]?.outstanding == 0)
        let reports = table.reports(now: Table.reportEveryNs, force: false)
        #expect(reports.count == 1)
        let report = try #require(reports.first)
        #expect(report.target == "com.b" && report.endedLink == nil)
        #expect(report.calls.counts[.ok] == 1 && report.calls.counts[.error] == 1)
        #expect(report.calls.buckets[0] == 1 && report.calls.buckets[1] == 1 && report.calls.sumNs == 100_000)
        #expect(report.calls.problem == nil)
        // Counted once: nothing new, nothing sent; and not again before 250 ms have passed.
        let nothing = table.reports(now: Table.reportEveryNs + 1, force: false)
        #expect(nothing.isEmpty)
        _ = try Self.callOut(&table, 9)
        _ = table.replied(9, on: 1, .ok, now: 1)
        let early = table.reports(now: 2 * Table.reportEveryNs - 1, force: false)
        let forced = table.reports(now: 2 * Table.reportEveryNs - 1, force: true)
        #expect(early.isEmpty && forced.count == 1)
    }

    @Test func aCallPastItsDeadlineTimesOutAndItsReplyIsThenLate() throws {
        var (table, socket) = Self.caller()
        _ = try Self.callOut(&table, 8, requestedMs: 20)
        _ = try Self.callOut(&table, 7, requestedMs: 10)
        _ = try Self.callOut(&table, 9, requestedMs: 30)
        let none = table.expire(now: 10 * Self.ms - 1)
        #expect(none.isEmpty)
        let expired = table.expire(now: 20 * Self.ms)
        #expect(expired.map(\.id) == [7, 8])
        #expect(expired.allSatisfy { $0.peer == "com.b" && $0.socket === socket })
        #expect(table.earliest == 30 * Self.ms)
        let late = table.replied(7, on: 1, .ok, now: 21 * Self.ms)
        #expect(!late)
        #expect(table.links[1]?.outstanding == 1)
        let report = table.reports(now: Table.reportEveryNs, force: false)
        #expect(report.first?.calls.counts[.timeout] == 2)
    }

    @Test func aLinkGoneWithCallsInFlightFailsThemUnavailable() throws {
        var (table, socket) = Self.caller()
        _ = try Self.callOut(&table, 9)
        _ = try Self.callOut(&table, 3)
        let removed = table.remove(1, now: 5)
        let gone = try #require(removed)
        #expect(gone.isCaller && gone.peer == "com.b" && gone.socket === socket)
        #expect(gone.failed.map(\.id) == [3, 9] && gone.failed.allSatisfy { !$0.started } && gone.cancelled.isEmpty && gone.unlinkReply == nil)
        let again = table.remove(1, now: 6)
        #expect(again == nil, "settled once")
        #expect(table.calls.isEmpty && table.links.isEmpty)
        let next = table.callOut(4, to: "com.b", requestedMs: nil, now: 7)
        #expect(next == nil, "the next call goes through the supervisor")
        let reports = table.reports(now: 8, force: true, ended: ("com.b", 1))
        let report = try #require(reports.first)
        #expect(report.calls.counts[.unavailable] == 2 && report.endedLink == 1)
    }

    @Test func anUnlinkIsAnsweredOnceItsCallsAreSettled() throws {
        var (table, _) = Self.caller()
        _ = try Self.callOut(&table, 7)
        _ = try Self.callOut(&table, 8)
        let atOnce = table.unlink(UnlinkMessage(id: 40, peer: "com.b", link: 1))
        #expect(!atOnce, "not at once: calls are out")
        let more = table.callOut(9, to: "com.b", requestedMs: nil, now: 1)
        #expect(more == nil, "no new calls over it")
        let before = table.unlinksSettled()
        _ = table.replied(7, on: 1, .ok, now: 2)
        let oneLeft = table.unlinksSettled()
        #expect(before.isEmpty && oneLeft.isEmpty)
        let expired = table.expire(now: 600 * Self.ms)
        #expect(expired.map(\.id) == [8])
        let settled = table.unlinksSettled()
        #expect(settled == [1])
        let removed = table.remove(1, now: 3)
        #expect(removed?.unlinkReply == 40)
    }

    @Test func anUnlinkBeforeItsOrderIsAnsweredAtOnceAndTheOrderRefused() {
        var table = Table()
        let early = table.unlink(UnlinkMessage(id: 5, peer: "com.b", link: 3))
        let refused = table.add(PeerLinkOrder(kind: .caller, peer: "com.b", link: 3, timeoutMs: 500), socket: Socket())
        let next = table.add(PeerLinkOrder(kind: .caller, peer: "com.b", link: 4, timeoutMs: 500), socket: Socket())
        #expect(early && !refused && next)
        // An unlink of a link already gone (at or below the last order) is answered, and nothing else.
        let old = table.unlink(UnlinkMessage(id: 6, peer: "com.b", link: 2))
        #expect(old)
        #expect(table.links.keys.sorted() == [4])
    }

    @Test func aNewerLinkToTheSameCalleeTakesTheCalls() throws {
        var (table, first) = Self.caller()
        let second = Socket()
        let added = table.add(PeerLinkOrder(kind: .caller, peer: "com.b", link: 2, timeoutMs: 500), socket: second)
        #expect(added)
        #expect(table.links[1]?.accepting == false)
        #expect(try Self.callOut(&table, 1).socket === second)
        #expect(first !== second)
    }

    @Test("calls written straight onto a link are bounded: past mostServedPerLink in the plugin, the next is refused until one is answered")
    func aLinkCannotMakeThePluginHoldEverything() throws {
        var table = Table()
        let added = (table.add(PeerLinkOrder(kind: .callee, peer: "com.a", link: 2), socket: Socket()),
                     table.add(PeerLinkOrder(kind: .callee, peer: "com.c", link: 3), socket: Socket()))
        #expect(added.0 && added.1)
        var first: UInt64 = 0
        for id in 0..<UInt64(Table.mostServedPerLink) {
            let served = table.serve(id, on: 2).taken
            if id == 0 { first = served?.local ?? 0 }
            if served == nil { Issue.record("call \(id) refused"); return }
        }
        let over = table.serve(1_000_000, on: 2)
        #expect(over == .tooMany)
        // Another link is not held back by it.
        let other = table.serve(1, on: 3).taken
        #expect(other != nil)
        _ = table.answered(first)
        let room = table.serve(1_000_001, on: 2).taken, full = table.serve(1_000_002, on: 2)
        #expect(room != nil && full == .tooMany)
    }

    @Test func aCalleeMapsCallsToLocalIdsAndBack() throws {
        var table = Table()
        let socket = Socket()
        let added = table.add(PeerLinkOrder(kind: .callee, peer: "com.a", link: 2), socket: socket)
        #expect(added)
        let served = (table.serve(7, on: 2).taken, table.serve(8, on: 2).taken, table.serve(9, on: 5).taken)
        let first = try #require(served.0), second = try #require(served.1)
        #expect(first.peer == "com.a" && Table.localIDs.contains(first.local) && second.local == first.local + 1)
        #expect(served.2 == nil, "no such link")
        // Answered: the reply goes to the caller's id, once.
        let answers = (table.answered(first.local), table.answered(first.local))
        let answer = try #require(answers.0)
        #expect(answer.peerID == 7 && answer.socket === socket && answers.1 == nil)
        // Cancelled by the caller: the plugin gets the local id; a reply after it is dropped.
        let cancels = (table.cancelled(8, on: 2), table.cancelled(8, on: 2), table.answered(second.local))
        #expect(cancels.0 == second.local && cancels.1 == nil && cancels.2 == nil)
        // Another caller's link may use the same ids: each link's calls are its own.
        let addedOther = table.add(PeerLinkOrder(kind: .callee, peer: "com.c", link: 3), socket: Socket())
        let servedOther = table.serve(7, on: 3).taken
        let other = try #require(servedOther)
        #expect(addedOther)
        #expect(other.peer == "com.c" && other.local != first.local && table.answerCredit(7, on: 2) == nil)
        // The caller's worker ended: what is still served is cancelled, and only that link's.
        let third = try #require(table.serve(10, on: 2).taken)
        let removed = table.remove(2, now: 0)
        let gone = try #require(removed)
        #expect(!gone.isCaller && gone.cancelled == [third.local] && gone.failed.isEmpty)
        #expect(Array(table.served.keys) == [other.local] && table.answerCredit(7, on: 3) == other.local)
        let cancelledOther = table.cancelled(7, on: 3)
        #expect(cancelledOther == other.local && table.served.isEmpty)
    }

    /// A reply the plugin wrote as the SDK does goes back over the link as written after its id,
    /// under the caller's id: the same bytes a frame built for it would have.
    @Test(arguments: [0, 7, 10, 99, 1 << 61 + 5, UInt64.max] as [UInt64])
    func aReplyOverALinkCarriesTheCallersID(_ peerID: UInt64) throws {
        let plugin = Array(#"{"type":"reply","id":2305843009213693957,"result":{"n":1}}"#.utf8)
        let leading = try #require(plugin.withUnsafeBytes { PeerLinks.leadingReplyID($0) })
        #expect(leading.id == 1 << 61 + 5 && plugin[leading.idEnd] == UInt8(ascii: ","))
        let rest = Array(plugin[leading.idEnd...])
        let sent = Frame.withHead(.reply, id: peerID, restCount: rest.count) { Array($0) + rest }
        var built = FrameBuilder(kind: .reply)
        built.uint("id", peerID)
        built.raw("result", Array(#"{"n":1}"#.utf8))
        #expect(sent == built.finish())
        // Any other shape is not taken as the SDK's.
        for other in [#"{"type":"reply","id":"7","result":1}"#, #"{"type":"reply","id":7x}"#, #"{"id":7,"type":"reply"}"#] {
            #expect(Array(other.utf8).withUnsafeBytes { PeerLinks.leadingReplyID($0) } == nil)
        }
    }

    // MARK: Streams over a link (docs/protocol.md "Streams")

    @Test func aStreamCallWhoseCalleeEndsGoesAgainUnlessItsAnswerHadBegunOrItHadAnInput() throws {
        var table = Table()
        let added = table.add(PeerLinkOrder(kind: .caller, peer: "com.b", link: 1, timeoutMs: 5_000, streamIdleTimeoutMs: 100), socket: Socket())
        #expect(added)
        let written: [UInt8] = Array(#"{"type":"call","id":7,"target":"com.b","method":"rows","stream":true}"#.utf8)
        #expect(table.callOut(7, to: "com.b", requestedMs: nil, now: 0, stream: true, written: written) != nil)
        #expect(table.callOut(8, to: "com.b", requestedMs: nil, now: 0, stream: true, written: written) != nil)
        #expect(table.callOut(9, to: "com.b", requestedMs: nil, now: 0, input: true, written: written) != nil)
        #expect(table.answerChunk(8, seq: 0, hasData: true, on: 1, now: Self.ms) == .deliver(8))
        let removed = table.remove(1, now: 2 * Self.ms)
        let gone = try #require(removed)
        // 7: no chunk came, it goes again with the call's own deadline (5 s), not the idle one.
        #expect(gone.sentAgain.map(\.id) == [7] && gone.sentAgain.first?.deadline == 5_000 * Self.ms)
        #expect(gone.sentAgain.first?.written == written)
        // 8: a chunk came (its plugin ran it): started. 9: its input is not kept.
        #expect(gone.failed.map(\.id) == [8, 9] && gone.failed.map(\.started) == [true, false])
    }

    @Test func aStreamsAnswerIsCheckedAgainstItsWindowAndItsIdleTimeoutMoves() throws {
        var table = Table()
        let added = table.add(PeerLinkOrder(kind: .caller, peer: "com.b", link: 1, timeoutMs: 5_000, streamIdleTimeoutMs: 100), socket: Socket())
        #expect(added)
        let out = table.callOut(7, to: "com.b", requestedMs: nil, now: 0, stream: true)
        #expect(out != nil)
        // The idle timeout (100 ms) is sooner than the call's (5 s).
        #expect(table.calls[7]?.deadline.monotonic == 100 * Self.ms)
        for seq in 0..<UInt64(StreamFrames.initialCredit) {
            let arrival = table.answerChunk(7, seq: seq, hasData: true, on: 1, now: Int64(seq + 1) * Self.ms)
            #expect(arrival == .deliver(7))
        }
        #expect(table.calls[7]?.deadline.monotonic == (16 + 100) * Self.ms)
        let over = table.answerChunk(7, seq: 16, hasData: true, on: 1, now: 20 * Self.ms)
        #expect(over == .violation("chunk 16 of call 7 beyond the credit its reader granted"))
        let room = table.grantAnswer(7, n: 8)
        #expect(room != nil)
        let granted = table.answerChunk(7, seq: 16, hasData: true, on: 1, now: 20 * Self.ms)
        let outOfOrder = table.answerChunk(7, seq: 30, hasData: true, on: 1, now: 20 * Self.ms)
        let wrongLink = table.answerChunk(7, seq: 17, hasData: true, on: 2, now: 20 * Self.ms)
        #expect(granted == .deliver(7) && wrongLink == .late)
        #expect(outOfOrder == .violation("chunk 30 of call 7, expected 17"))
        // A call without a stream may not get chunks; an id never sent is late.
        let plain = table.callOut(8, to: "com.b", requestedMs: nil, now: 0)
        #expect(plain != nil)
        let unasked = table.answerChunk(8, seq: 0, hasData: true, on: 1, now: 0)
        let unknown = table.answerChunk(99, seq: 0, hasData: true, on: 1, now: 0)
        #expect(unasked == .violation("chunk for call 8, which did not ask for a stream") && unknown == .late)
        // Past the idle deadline the stream expires as idle, not as a call out of time.
        let expired = table.expire(now: 200 * Self.ms)
        #expect(expired.map(\.id) == [7] && expired.first?.idleMs == 100)
        let reports = table.reports(now: Int64.max / 2, force: true)
        #expect(reports.first?.streams == CallHop.StreamTally(opened: 1, answer: 17, input: 0))
    }

    @Test func aServedCallsInputIsCheckedAgainstTheWindowItsPluginGranted() throws {
        var table = Table()
        let added = table.add(PeerLinkOrder(kind: .callee, peer: "com.a", link: 3), socket: Socket())
        #expect(added)
        let served = table.serve(5, on: 3, input: true).taken
        let local = try #require(served).local
        // Nothing may come before the plugin grants its first window.
        let early = table.inputChunk(5, seq: 0, end: false, hasData: true, on: 3)
        #expect(early == .violation("input chunk 0 of call 5 beyond the credit its reader granted"))
        let grant = table.streamOut(local, inputCredit: 2)
        #expect(grant?.peerID == 5)
        let first = table.inputChunk(5, seq: 0, end: false, hasData: true, on: 3)
        let second = table.inputChunk(5, seq: 1, end: false, hasData: true, on: 3)
        let third = table.inputChunk(5, seq: 2, end: false, hasData: true, on: 3)
        #expect(first == .deliver(local) && second == .deliver(local))
        #expect(third == .violation("input chunk 2 of call 5 beyond the credit its reader granted"))
        let end = table.inputChunk(5, seq: 2, end: true, hasData: false, on: 3)
        let after = table.inputChunk(5, seq: 3, end: false, hasData: true, on: 3)
        #expect(end == .deliver(local) && after == .violation("an input chunk of call 5 after its end"))
        // The caller's credit for the answer reaches the plugin under the local id; once answered, nothing does.
        #expect(table.answerCredit(5, on: 3) == local)
        _ = table.answered(local)
        #expect(table.answerCredit(5, on: 3) == nil)
        let late = table.inputChunk(5, seq: 3, end: false, hasData: true, on: 3)
        #expect(late == .late)
    }

    @Test func aCallerThatCancelsSettlesItsCallOnTheLink() throws {
        var (table, socket) = Self.caller()
        let out = table.callOut(7, to: "com.b", requestedMs: nil, now: 0, stream: true)
        let cancelled = table.cancelOut(7), again = table.cancelOut(7)
        #expect(out != nil && cancelled === socket && again == nil)
        #expect(table.calls[7] == nil && table.links[1]?.outstanding == 0)
    }
}

/// What a link's reader does with descriptors that came with its frames (`LinkReader`).
@Suite struct LinkReaderTests {
    /// A frame sent with `fds` riding on its first bytes, as a peer would.
    static func send(_ fd: Int32, _ json: String, fds: [Int32]) {
        let body = Array(json.utf8)
        let frame = withUnsafeBytes(of: UInt32(body.count).bigEndian, Array.init) + body
        _ = frame.withUnsafeBytes { raw in fds.withUnsafeBufferPointer { cls_send_fds_now(fd, $0.baseAddress, Int32($0.count), raw.baseAddress, raw.count) } }
    }

    @Test("descriptors that no frame announces are closed and the link is not trusted; a frame not yet whole may have one message's worth waiting")
    func unannouncedDescriptors() throws {
        var pair: [Int32] = [-1, -1]
        #expect(socketpair(AF_UNIX, Int32(SOCK_STREAM.rawValue), 0, &pair) == 0)
        defer { close(pair[0]) }
        let socket = LinkSocket(fd: pair[1])
        let reader = LinkReader(socket, maxBody: 1 << 20)
        // Received, a descriptor is a new number in this process: count them before and after.
        let before = (try? FileManager.default.contentsOfDirectory(atPath: "/proc/self/fd").count) ?? 0
        var pipes: [Int32] = [-1, -1]
        #expect(pipe(&pipes) == 0)
        Self.send(pair[0], #"{"type":"cancel","id":1}"#, fds: pipes)
        close(pipes[0]); close(pipes[1])
        #expect(reader.read() == .some)
        while (try? reader.decoder.next({ _ in })) != nil {}
        #expect((try? FileManager.default.contentsOfDirectory(atPath: "/proc/self/fd").count) ?? 0 == before + 2)
        #expect(!reader.settleDescriptors(partialFrame: false))
        #expect((try? FileManager.default.contentsOfDirectory(atPath: "/proc/self/fd").count) ?? 0 == before, "the unannounced descriptors were kept")
        #expect(reader.settleDescriptors(partialFrame: false), "nothing left")
    }
}
