import PluginProtocol

/// The state of a worker's peer links and nothing else (docs/protocol.md "Peer links"): the links
/// it has in either role, the calls its plugin sent over them with their deadlines, the calls it
/// serves for callers under ids of its own, and the counts for the supervisor (`linkCalls`). Each
/// move is a mutating method that returns what to do (send, deliver, close, answer); `PeerLinks`
/// keeps the table behind its lock and does the I/O. `Socket` is what a link is written to and read
/// from (`LinkSocket`); the table only carries it. Times are CLOCK_MONOTONIC ns, given by the caller.
struct LinkTable<Socket: AnyObject & Sendable> {
    /// One link, as the table knows it.
    struct Link {
        let number: UInt64
        /// The other plugin.
        let peer: String
        let isCaller: Bool
        /// Caller role: the callee's timeout, for calls that name none (from the order).
        let timeoutMs: Int
        let socket: Socket
        /// Caller role: still takes new calls (false once unlinked, or replaced by a newer link).
        var accepting = true
        /// Caller role: calls sent over it and not yet settled.
        var outstanding = 0
        /// Caller role: the supervisor's `unlink` request to answer once `outstanding` is 0.
        var unlinkReply: UInt64?
        /// Callee role: the caller's id → local id, for `cancel`.
        var served: [UInt64: UInt64] = [:]
    }

    /// Caller role: a call the plugin sent over a link.
    struct OutCall {
        let link: UInt64
        let deadline: Int64
        let started: Int64
    }

    /// Callee role: a call that came over a link, under its local id.
    struct ServedCall {
        let link: UInt64
        let peerID: UInt64
        let socket: Socket
    }

    /// Ids of calls that came over links, as the plugin sees them: [2^61, 2^62) (the supervisor's
    /// ids count up from 1; the worker's own events use 2^62 and up).
    static var localIDs: Range<UInt64> { (1 << 61)..<(1 << 62) }
    /// How often the call counts go to the supervisor, when there are any.
    static var reportEveryNs: Int64 { 250_000_000 }

    private(set) var links: [UInt64: Link] = [:]
    /// Caller role: the link each callee's calls go over (absent while it is being unlinked).
    private(set) var byPeer: [String: UInt64] = [:]
    /// Caller role: the plugin's call id → its call over a link.
    private(set) var calls: [UInt64: OutCall] = [:]
    /// Callee role: local id → the link and the caller's id.
    private(set) var served: [UInt64: ServedCall] = [:]
    private var nextLocal = localIDs.lowerBound
    /// Caller role: the calls settled per callee since the last report.
    private(set) var stats: [String: CallHop.Tally] = [:]
    private var lastReport: Int64 = 0
    /// No call's deadline is earlier (it may be earlier than the earliest left: the links thread
    /// then wakes, finds nothing due and raises it): no scan of `calls` per call.
    private(set) var earliest: Int64 = .max
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
                                 timeoutMs: order.timeoutMs ?? CallTimeouts.defaultMs, socket: socket)
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
        /// Caller role: the plugin's calls on it, to fail with `unavailable` (counted so).
        let failed: [UInt64]
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
        var failed: [UInt64] = []
        if link.isCaller {
            for (id, call) in calls where call.link == number {
                failed.append(id)
                record(link.peer, .unavailable, started: call.started, now: now)
            }
            for id in failed { calls[id] = nil }
        }
        let cancelled = Array(link.served.values)
        for local in cancelled { served[local] = nil }
        return Removed(peer: link.peer, isCaller: link.isCaller, socket: link.socket, failed: failed.sorted(),
                       cancelled: cancelled.sorted(), unlinkReply: link.unlinkReply)
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
    mutating func callOut(_ id: UInt64, to target: String, requestedMs: UInt64?, now: Int64) -> (socket: Socket, wake: Bool)? {
        guard let number = byPeer[target], calls[id] == nil, let i = links.index(forKey: number), links.values[i].accepting else { return nil }
        links.values[i].outstanding += 1
        let deadline = now + Int64(CallHop.timeoutMs(requested: requestedMs, otherwise: links.values[i].timeoutMs)) * 1_000_000
        calls[id] = OutCall(link: number, deadline: deadline, started: now)
        earliest = min(earliest, deadline)
        return (links.values[i].socket, deadline < plannedWake)
    }

    /// The call `id` could not be written at all (the link is full or closed). True: it is taken
    /// back and goes through the supervisor; false: it was settled meanwhile (its link ended or
    /// its deadline passed), and the plugin has its answer.
    mutating func unsent(_ id: UInt64) -> Bool {
        guard let call = calls.removeValue(forKey: id) else { return false }
        links[call.link]?.outstanding -= 1
        settling = true  // an unlink may be waiting for this call
        return true
    }

    /// A reply to call `id` came over link `number`. True: deliver it; false: late (the call timed
    /// out, or is not that link's), dropped as the supervisor drops a late reply.
    mutating func replied(_ id: UInt64, on number: UInt64, _ outcome: CallHop.Outcome, now: Int64) -> Bool {
        guard let call = calls[id], call.link == number, let i = links.index(forKey: number) else { return false }
        calls[id] = nil
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
    }

    /// Settles the calls whose deadline has passed (counted as `timeout`), in id order.
    mutating func expire(now: Int64) -> [Expired] {
        guard now >= earliest else { return [] }
        var due: [UInt64] = []
        var next = Int64.max
        for (id, call) in calls {
            if call.deadline <= now { due.append(id) } else { next = min(next, call.deadline) }
        }
        earliest = next
        var out: [Expired] = []
        for id in due.sorted() {
            let call = calls.removeValue(forKey: id)!
            guard let i = links.index(forKey: call.link) else { continue }
            links.values[i].outstanding -= 1
            if !links.values[i].accepting { settling = true }
            record(links.values[i].peer, .timeout, started: call.started, now: now)
            out.append(Expired(id: id, peer: links.values[i].peer, socket: links.values[i].socket))
        }
        return out
    }

    // MARK: Callee role

    /// A call came over link `number` with the caller's id: the local id the plugin gets it under,
    /// and the caller (its `from`). Nil when the link is gone.
    mutating func serve(_ callerID: UInt64, on number: UInt64) -> (local: UInt64, peer: String)? {
        guard let i = links.index(forKey: number) else { return nil }
        let local = nextLocal
        nextLocal = local + 1 < Self.localIDs.upperBound ? local + 1 : Self.localIDs.lowerBound
        served[local] = ServedCall(link: number, peerID: callerID, socket: links.values[i].socket)
        links.values[i].served[callerID] = local
        return (local, links.values[i].peer)
    }

    /// The caller cancelled its call `callerID` on link `number`: the local id to `cancel`, if the
    /// plugin has not answered it.
    mutating func cancelled(_ callerID: UInt64, on number: UInt64) -> UInt64? {
        guard let local = links[number]?.served.removeValue(forKey: callerID) else { return nil }
        served[local] = nil
        return local
    }

    /// The plugin answered local id `local`: where the reply goes, under the caller's id. Nil: its
    /// caller went away (the call was cancelled), and the reply is dropped.
    mutating func answered(_ local: UInt64) -> ServedCall? {
        guard let call = served.removeValue(forKey: local) else { return nil }
        links[call.link]?.served[call.peerID] = nil
        return call
    }

    // MARK: Reports and waits

    /// The `linkCalls` reports due (every `reportEveryNs` while there is something to count, or
    /// now with `force`), one per callee; `ended`'s (a caller's link that ended by itself) says
    /// so, even with nothing to count.
    mutating func reports(now: Int64, force: Bool, ended: (peer: String, number: UInt64)? = nil) -> [CallHop.LinkCalls] {
        guard force || now >= lastReport + Self.reportEveryNs else { return [] }
        var out: [CallHop.LinkCalls] = []
        for (peer, calls) in stats where !calls.isEmpty || peer == ended?.peer {
            out.append(CallHop.LinkCalls(target: peer, calls: calls, endedLink: peer == ended?.peer ? ended?.number : nil))
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
        let reportDue = stats.values.contains { !$0.isEmpty } ? lastReport + Self.reportEveryNs : Int64.max
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
