import CallTracking
import PluginProtocol

/// The state of a worker's peer links and nothing else (docs/protocol.md "Peer links"): the links
/// it has in either role, the calls its plugin sent over them with their deadlines, the calls it
/// serves for callers under ids of its own, and the counts for the supervisor (`linkCalls`). Each
/// move is a mutating method that returns what to do (send, deliver, close, answer); `PeerLinks`
/// keeps the table behind its lock and does the I/O. `Socket` is what a link is written to and read
/// from (`LinkSocket`); the table only carries it. Times are CLOCK_MONOTONIC ns, given by the caller.
/// Its entries (links, calls either way, their streams) are in LinkTableEntries.swift.
struct LinkTable<Socket: AnyObject & Sendable> {
    /// Ids of calls that came over links, as the plugin sees them: [2^61, 2^62) (the supervisor's
    /// ids count up from 1; the worker's own events use 2^62 and up).
    static var localIDs: Range<UInt64> { (1 << 61)..<(1 << 62) }
    /// How often the call counts go to the supervisor, when there are any.
    static var reportEveryNs: Int64 { 250_000_000 }

    private(set) var links: [UInt64: Link] = [:]
    /// Caller role: the link each callee's calls go over (absent while it is being unlinked).
    private(set) var byPeer: [String: UInt64] = [:]
    /// Caller role: the plugin's call id → its call over a link (the product's one caller table).
    private(set) var calls = CallTable<OutCall>()
    /// Callee role: local id → the link and the caller's id.
    private(set) var served: [UInt64: ServedCall] = [:]
    /// Callee role: the link and the caller's id → local id, for `cancel` and the input's chunks
    /// (one table for every link: an entry of a link's own would be copied out and back on each change).
    private var servedByCaller: [CallerKey: UInt64] = [:]
    /// Callee role: how many of `served` each link brought. A caller's worker keeps its calls'
    /// deadlines; a plugin writing calls straight onto its link does not, and this bounds what it
    /// can make this worker hold (`mostServedPerLink`).
    private var servedPerLink: [UInt64: Int] = [:]

    /// Calls one link may have in this worker's plugin at once: far past what a caller's worker
    /// sends (its plugin's calls in flight), and a bound on the memory one link can take here.
    static var mostServedPerLink: Int { 65_536 }
    private var nextLocal = localIDs.lowerBound
    /// Caller role: the calls settled per callee since the last report.
    private(set) var stats: [String: CallHop.Tally] = [:]
    /// Caller role: the streams per callee since the last report.
    private(set) var streamStats: [String: CallHop.StreamTally] = [:]
    private var lastReport: Int64 = 0
    /// No call's deadline is earlier (it may be earlier than the earliest left: the links thread
    /// then wakes, finds nothing due and raises it): no scan of `calls` per call.
    var earliest: Int64 { calls.earliest.monotonic }
    /// A link taken back may have settled its last call: looked for after the next wake.
    private var settling = false
    /// When the links thread, waiting in poll, wakes by itself (.max: only for I/O): a call with an
    /// earlier deadline wakes it. `.min` while it is not waiting (it looks at `earliest` again
    /// before it waits): no wake-up then, which would cost a write and a poll round per call.
    private var plannedWake: Int64 = .min
    /// Links taken back before their order arrived (the two travel on different sockets).
    private var unlinkedEarly: Set<UInt64> = []
    /// The highest link number an order came for (the supervisor numbers links in order, and a
    /// worker's orders come on one socket): an unlink at or below it is not early.
    private var highestOrder: UInt64 = 0

    // MARK: Links

    /// A link the supervisor handed over. False: it was taken back before it came (close it).
    mutating func add(_ order: PeerLinkOrder, socket: Socket) -> Bool {
        highestOrder = max(highestOrder, order.link)
        let early = unlinkedEarly.remove(order.link) != nil
        unlinkedEarly = unlinkedEarly.filter { $0 > order.link }
        guard !early else { return false }
        let isCaller = order.kind == .caller
        links[order.link] = Link(number: order.link, peer: order.peer, isCaller: isCaller,
                                 timeoutMs: order.timeoutMs ?? CallTimeouts.defaultMs,
                                 streamIdleMs: order.streamIdleTimeoutMs ?? CallTimeouts.defaultMs, socket: socket,
                                 markSlot: isCaller ? nil : order.markSlot)
        guard isCaller else { return true }
        // The supervisor makes one link per caller and callee; an older one is being taken back.
        if let older = byPeer[order.peer] { links[older]?.accepting = false }
        byPeer[order.peer] = order.link
        if stats[order.peer] == nil { stats[order.peer] = CallHop.Tally() }
        return true
    }

    /// What `remove` settled of a link that is gone.
    struct Removed {
        let peer: String
        let isCaller: Bool
        let socket: Socket
        /// Caller role: the plugin's calls on it, to fail with `unavailable` (counted so): a
        /// stream call part of whose answer came (`started`: its plugin ran it), or one with an input.
        let failed: [(id: UInt64, started: Bool)]
        /// Caller role: the plugin's calls on it that go again through the supervisor (the link
        /// ended by itself: its callee's worker may have died), in id order. Counted there.
        let sentAgain: [SentAgain]
        /// Callee role: local ids of the calls it served, to `cancel` in the plugin.
        let cancelled: [UInt64]
        /// The `unlink` to answer, when it was taken back.
        let unlinkReply: UInt64?
    }

    /// Link `number` ended (its peer's worker ended, it broke, or it was taken back and is
    /// settled): its calls are settled as the supervisor settles the calls of a worker that
    /// ended. Nil when it was already gone.
    mutating func remove(_ number: UInt64, now: Int64) -> Removed? {
        guard let link = links.removeValue(forKey: number) else { return nil }
        if byPeer[link.peer] == number { byPeer[link.peer] = nil }
        var failed: [(id: UInt64, started: Bool)] = []
        var sentAgain: [SentAgain] = []
        if link.isCaller {
            for (id, call) in calls.entries where call.link == number {
                // A stream of answers none of which came goes again as a plain call does: the
                // supervisor decides from the link's mark. One that had begun answering had run.
                let answered = (call.stream?.credit.seq ?? 0) > 0
                if let written = call.written, !answered {
                    // What is left of its time: a stream's table deadline is its idle one.
                    let deadline = call.stream.map { $0.callDeadline } ?? call.deadline.monotonic
                    sentAgain.append(SentAgain(id: id, written: written, deadline: deadline))
                } else {
                    failed.append((id, answered))
                    record(link.peer, .unavailable, started: call.started, now: now)
                }
            }
            for (id, _) in failed { _ = calls.settle(id) }
            for call in sentAgain { _ = calls.settle(call.id) }
        }
        var cancelled: [UInt64] = []
        if !link.isCaller {
            for (local, call) in served where call.link == number { cancelled.append(local) }
            for local in cancelled {
                if let call = served.removeValue(forKey: local) { servedByCaller[CallerKey(link: number, id: call.peerID)] = nil }
            }
            servedPerLink[number] = nil
        }
        return Removed(peer: link.peer, isCaller: link.isCaller, socket: link.socket, failed: failed.sorted { $0.id < $1.id },
                       sentAgain: sentAgain.sorted { $0.id < $1.id }, cancelled: cancelled.sorted(), unlinkReply: link.unlinkReply)
    }

    /// `unlink` from the supervisor: no new calls over that link. False: answer once its calls are
    /// settled (`unlinksSettled`); true: answer now (not a link of this worker's, or one whose
    /// order has not come yet: that order is then refused by `add`).
    mutating func unlink(_ message: UnlinkMessage) -> Bool {
        guard let i = links.index(forKey: message.link), links.values[i].isCaller else {
            if message.link > highestOrder { unlinkedEarly.insert(message.link) }
            return true
        }
        links.values[i].accepting = false
        links.values[i].unlinkReply = message.id
        let peer = links.values[i].peer
        if byPeer[peer] == message.link { byPeer[peer] = nil }
        settling = true
        return false
    }

    /// Links taken back whose calls are all settled: to close (`remove`) and answer.
    mutating func unlinksSettled() -> [UInt64] {
        guard settling else { return [] }
        settling = false
        return links.values.filter { $0.isCaller && $0.unlinkReply != nil && $0.outstanding == 0 }.map(\.number).sorted()
    }

    // MARK: Caller role

    /// The plugin calls `target` with its id `id`: over a link when there is one that takes calls
    /// and no call of that id is on one, with its deadline (`CallHop.timeoutMs`). Nil: through the
    /// supervisor. `wake`: the links thread must be woken for the new deadline.
    /// A call with a stream (`stream`: it asks for an answer of chunks; `input`: it sends input)
    /// also gets the idle timeout: its deadline is the sooner of the two. `written`: the call as
    /// the plugin wrote it, kept (not for a call with an input: its chunks are not kept) to go
    /// again through the supervisor if its callee dies with it before answering.
    mutating func callOut(_ id: UInt64, to target: String, requestedMs: UInt64?, now: Int64,
                          stream: Bool = false, input: Bool = false, written: [UInt8]? = nil) -> (socket: Socket, wake: Bool)? {
        guard let number = byPeer[target], !calls.contains(id), let i = links.index(forKey: number), links.values[i].accepting else { return nil }
        links.values[i].outstanding += 1
        var deadline = now + Int64(CallHop.timeoutMs(requested: requestedMs, otherwise: links.values[i].timeoutMs)) * 1_000_000
        var flow: OutStream?
        if stream || input {
            let made = OutStream(credit: StreamCredit(answers: stream, input: false), idleNs: Int64(links.values[i].streamIdleMs) * 1_000_000,
                                 callDeadline: deadline)
            deadline = min(deadline, now + made.idleNs)
            flow = made
            streamStats[links.values[i].peer, default: CallHop.StreamTally()].opened += 1
        }
        calls.insert(OutCall(link: number, deadline: Instant(monotonic: deadline), started: now, stream: flow,
                             written: input ? nil : written), id: id)
        return (links.values[i].socket, deadline < plannedWake)
    }

    /// A chunk of the answer to call `id` came over link `number` (caller role): checked against
    /// the window the plugin granted and the order; the call's idle deadline moves.
    mutating func answerChunk(_ id: UInt64, seq: UInt64?, hasData: Bool, on number: UInt64, now: Int64) -> StreamArrival {
        guard let call = calls[id], call.link == number else { return .late }
        guard var flow = call.stream, flow.credit.answers else { return .violation("chunk for call \(id), which did not ask for a stream") }
        guard seq == flow.credit.seq else { return .violation("chunk \(seq.map { "\($0)" } ?? "without seq") of call \(id), expected \(flow.credit.seq)") }
        guard hasData else { return .violation("chunk of call \(id) without data") }
        if let refused = flow.credit.answerChunk(seq: seq, id: id) { return .violation(refused) }
        calls[id]?.stream = flow
        calls[id]?.deadline = Instant(monotonic: min(flow.callDeadline, now + flow.idleNs))
        if let peer = links[number]?.peer { streamStats[peer, default: CallHop.StreamTally()].answer += 1 }
        return .deliver(id)
    }

    /// The plugin grants `n` more chunks of the answer to its call `id` (caller role): where the
    /// `credit` goes, or nil (not a call over a link: it goes to the supervisor).
    mutating func grantAnswer(_ id: UInt64, n: UInt64) -> Socket? {
        guard let call = calls[id], var flow = call.stream, let link = links[call.link] else { return nil }
        flow.credit.grantAnswer(clamping: n)
        calls[id]?.stream = flow
        return link.socket
    }

    /// The plugin sends a chunk of its call `id`'s input (caller role): where it goes, or nil. The
    /// callee's worker checks it against the window its plugin granted; the idle deadline moves.
    mutating func inputOut(_ id: UInt64, end: Bool = false, now: Int64) -> Socket? {
        guard let call = calls[id], let flow = call.stream, let link = links[call.link] else { return nil }
        calls[id]?.deadline = Instant(monotonic: min(flow.callDeadline, now + flow.idleNs))
        if !end { streamStats[link.peer, default: CallHop.StreamTally()].input += 1 }
        return link.socket
    }

    /// The plugin gives up its call `id` (it stopped reading its stream): settled here, and the
    /// `cancel` goes over the link. Nil: not a call over a link.
    mutating func cancelOut(_ id: UInt64) -> Socket? {
        guard let call = calls.settle(id), let i = links.index(forKey: call.link) else { return nil }
        links.values[i].outstanding -= 1
        if !links.values[i].accepting { settling = true }
        return links.values[i].socket
    }

    /// The call `id` could not be written at all (the link is full or closed). True: it is taken
    /// back and goes through the supervisor; false: it was settled meanwhile (its link ended or
    /// its deadline passed), and the plugin has its answer.
    mutating func unsent(_ id: UInt64) -> Bool {
        guard let call = calls.settle(id) else { return false }
        links[call.link]?.outstanding -= 1
        settling = true  // an unlink may be waiting for this call
        return true
    }

    /// A reply to call `id` came over link `number`. True: deliver it; false: late (the call timed
    /// out, or is not that link's), dropped as the supervisor drops a late reply.
    mutating func replied(_ id: UInt64, on number: UInt64, _ outcome: CallHop.Outcome, now: Int64) -> Bool {
        guard let call = calls[id], call.link == number, let i = links.index(forKey: number) else { return false }
        _ = calls.settle(id)
        links.values[i].outstanding -= 1
        if !links.values[i].accepting { settling = true }
        record(links.values[i].peer, outcome, started: call.started, now: now)
        return true
    }

    /// A call past its deadline: the plugin gets `timeout`, the callee a `cancel` over `socket`.
    struct Expired {
        let id: UInt64
        let peer: String
        let socket: Socket
        /// A stream that moved no chunk for its idle timeout (ms), rather than a call out of time.
        var idleMs: Int64? = nil
    }

    /// Settles the calls whose deadline has passed (counted as `timeout`), in id order.
    mutating func expire(now: Int64) -> [Expired] {
        let (due, _) = calls.expire(now: Instant(monotonic: now))
        var out: [Expired] = []
        for (id, call) in due {
            guard let i = links.index(forKey: call.link) else { continue }
            links.values[i].outstanding -= 1
            if !links.values[i].accepting { settling = true }
            record(links.values[i].peer, .timeout, started: call.started, now: now)
            let idle = call.stream.flatMap { Instant(monotonic: $0.callDeadline) > call.deadline ? $0.idleNs / 1_000_000 : nil }
            out.append(Expired(id: id, peer: links.values[i].peer, socket: links.values[i].socket, idleMs: idle))
        }
        return out
    }

    // MARK: Callee role

    /// A call came over link `number` with the caller's id: the local id the plugin gets it under,
    /// and the caller (its `from`). Nil when the link is gone.
    enum Serving: Equatable {
        case call(local: UInt64, peer: String, markSlot: Int?)
        /// The link is gone.
        case gone
        /// The link has `mostServedPerLink` calls in the plugin already: refused.
        case tooMany

        /// The call as served, if it was.
        var taken: (local: UInt64, peer: String, markSlot: Int?)? {
            if case .call(let local, let peer, let markSlot) = self { (local, peer, markSlot) } else { nil }
        }
    }

    mutating func serve(_ callerID: UInt64, on number: UInt64, input: Bool = false) -> Serving {
        guard let link = links[number] else { return .gone }
        guard servedPerLink[number, default: 0] < Self.mostServedPerLink else { return .tooMany }
        servedPerLink[number, default: 0] += 1
        let local = nextLocal
        nextLocal = local + 1 < Self.localIDs.upperBound ? local + 1 : Self.localIDs.lowerBound
        served[local] = ServedCall(link: number, peerID: callerID, socket: link.socket, input: input ? InStream() : nil)
        servedByCaller[CallerKey(link: number, id: callerID)] = local
        return .call(local: local, peer: link.peer, markSlot: link.markSlot)
    }

    private mutating func servedOne(on number: UInt64) {
        if let n = servedPerLink[number] { servedPerLink[number] = n > 1 ? n - 1 : nil }
    }

    /// The caller cancelled its call `callerID` on link `number`: the local id to `cancel`, if the
    /// plugin has not answered it.
    mutating func cancelled(_ callerID: UInt64, on number: UInt64) -> UInt64? {
        guard let local = servedByCaller.removeValue(forKey: CallerKey(link: number, id: callerID)) else { return nil }
        served[local] = nil
        servedOne(on: number)
        return local
    }

    /// A chunk of the input of the caller's call `callerID` came over link `number` (callee role):
    /// checked against the window the plugin granted, its order and its end.
    mutating func inputChunk(_ callerID: UInt64, seq: UInt64?, end: Bool, hasData: Bool, on number: UInt64) -> StreamArrival {
        guard let local = servedByCaller[CallerKey(link: number, id: callerID)], let call = served[local] else { return .late }
        guard var input = call.input else { return .violation("an input chunk for call \(callerID), made without \"input\": true") }
        guard !input.ended else { return .violation("an input chunk of call \(callerID) after its end") }
        guard seq == input.seq else { return .violation("input chunk \(seq.map { "\($0)" } ?? "without seq") of call \(callerID), expected \(input.seq)") }
        if end {
            input.ended = true
        } else {
            guard hasData else { return .violation("an input chunk of call \(callerID) without data") }
            guard input.credit > 0 else { return .violation("input chunk \(input.seq) of call \(callerID) beyond the credit its reader granted") }
            input.credit -= 1
            input.seq += 1
        }
        served[local]?.input = input
        return .deliver(local)
    }

    /// The caller grants its call `callerID` more chunks of the answer (callee role): the local id
    /// to deliver the `credit` under, or nil (the call ended).
    func answerCredit(_ callerID: UInt64, on number: UInt64) -> UInt64? {
        servedByCaller[CallerKey(link: number, id: callerID)]
    }

    /// The plugin sends a chunk of its answer to local id `local`, or grants room for `n` more
    /// chunks of its input (callee role): where it goes, under the caller's id. Nil: its caller went
    /// away, and it is dropped.
    mutating func streamOut(_ local: UInt64, inputCredit n: UInt64? = nil) -> ServedCall? {
        guard var call = served[local] else { return nil }
        if let n, var input = call.input {
            input.credit = StreamFrames.creditClamped(input.credit, n)
            call.input = input
            served[local] = call
        }
        return call
    }

    /// The plugin answered local id `local`: where the reply goes, under the caller's id. Nil: its
    /// caller went away (the call was cancelled), and the reply is dropped.
    mutating func answered(_ local: UInt64) -> ServedCall? {
        guard let call = served.removeValue(forKey: local) else { return nil }
        servedByCaller[CallerKey(link: call.link, id: call.peerID)] = nil
        servedOne(on: call.link)
        return call
    }

    // MARK: Reports and waits

    /// The `linkCalls` reports due (every `reportEveryNs` while there is something to count, or
    /// now with `force`), one per callee; `ended`'s (a caller's link that ended by itself) says
    /// so, even with nothing to count.
    mutating func reports(now: Int64, force: Bool, ended: (peer: String, number: UInt64)? = nil) -> [CallHop.LinkCalls] {
        guard force || now >= lastReport + Self.reportEveryNs else { return [] }
        var out: [CallHop.LinkCalls] = []
        for (peer, calls) in stats where !calls.isEmpty || peer == ended?.peer || streamStats[peer].map({ !$0.isEmpty }) == true {
            let streams = streamStats.removeValue(forKey: peer)
            out.append(CallHop.LinkCalls(target: peer, calls: calls, endedLink: peer == ended?.peer ? ended?.number : nil,
                                         streams: streams?.isEmpty == false ? streams : nil))
            stats[peer] = CallHop.Tally()
        }
        if !out.isEmpty { lastReport = now }
        return out
    }

    /// A link the links thread polls.
    typealias Polled = (number: UInt64, isCaller: Bool, socket: Socket)

    /// The links thread is about to wait: the links to poll (into `polled`) and when it must wake
    /// by itself (.max: only for I/O), for a deadline or a report.
    mutating func waiting(polled: inout [Polled]) -> Int64 {
        let reportDue = stats.values.contains { !$0.isEmpty } || streamStats.values.contains { !$0.isEmpty } ? lastReport + Self.reportEveryNs : Int64.max
        plannedWake = min(earliest, reportDue)
        for link in links.values { polled.append((link.number, link.isCaller, link.socket)) }
        return plannedWake
    }

    /// The links thread woke: calls made now need not wake it.
    mutating func awake() {
        plannedWake = .min
    }

    /// Counts a settled call for the supervisor.
    private mutating func record(_ peer: String, _ outcome: CallHop.Outcome, started: Int64, now: Int64) {
        // In place (a copy out and back would copy the buckets on every call).
        stats[peer, default: CallHop.Tally()].record(outcome, nanoseconds: now - started)
    }
}
