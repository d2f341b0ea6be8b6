import CLinuxSupport
import IPC
import LinuxSupport
import PluginProtocol
import Synchronization
#if canImport(Glibc)
import Glibc
#endif

/// This worker's direct links to other plugins' workers (docs/protocol.md "Peer links"): a call its
/// plugin makes to a linked dependency goes straight to that plugin's worker and its reply comes
/// straight back, instead of two passes through the supervisor each way. The worker does for those
/// calls what the supervisor does for the others:
/// - as the caller's worker: each call's deadline (the call's own `timeoutMs`, else the callee's
///   timeout the supervisor gave with the link), `timeout` and `cancel` when it passes,
///   `unavailable` for the calls in flight when the callee's worker ends, and the call metrics
///   (`linkCalls` reports to the supervisor);
/// - as the callee's worker: ids (each link's ids are mapped into a range of this worker's own,
///   `localIDs`), `from`, a `traceparent` hop, and `cancel` for the calls of a caller that ended.
/// The supervisor makes every link (only towards a declared dependency), hands its ends over
/// descriptor 4, and takes it back before a planned stop of the callee (`unlink`, on the protocol
/// socket, SPEC §8). Only the caller's worker closes a link on purpose (once it was taken back and
/// its calls are settled); the callee's worker serves until its end closes, then cancels what is
/// left (calls whose caller gave up on them).
///
/// One thread (`links`) polls descriptor 4, every link and a wake-up eventfd, and delivers what
/// arrives into the plugin; the plugin's own threads send calls and replies (`intercept`).
final class PeerLinks: @unchecked Sendable {
    // @unchecked: `state` is behind its Mutex; `host` is set once before the thread starts (the
    // thread's creation orders it); each link's reader state is the links thread's alone.
    /// Descriptor 4, kept open for the supervisor's orders.
    private let channel: Int32
    private let wakeFD: Int32
    private let connection: BlockingConnection
    private let identifier: String
    private nonisolated(unsafe) var host: WorkerHost!
    private let state = Mutex(State())
    /// Links open (either role): the send path looks at nothing else when there are none, unless
    /// calls were ever served over one (a late reply to one must still be caught: its id means
    /// nothing to the supervisor, which would end this worker for it).
    private let linkCount = Atomic<Int>(0)
    private let servedEver = Atomic<Bool>(false)

    /// Ids of calls that came over links, as the plugin sees them: [2^61, 2^62) (the supervisor's
    /// ids count up from 1; the worker's own events use 2^62 and up).
    static let localIDs: Range<UInt64> = (1 << 61)..<(1 << 62)
    /// A call larger than this goes through the supervisor (a link's socket buffer is small).
    static let largestLinkedCall = 64 * 1024
    /// How long a reply may wait for room on a link before the link is given up.
    static let sendWaitMs: Int32 = 1000
    /// How often the call metrics go to the supervisor, when there are any.
    static let reportEveryNs: Int64 = 250_000_000

    struct OutCall {
        let link: Link
        let deadline: Int64
        let started: Int64
    }

    struct ServedCall {
        let link: Link
        let peerID: UInt64
    }

    struct State {
        var links: [UInt64: Link] = [:]
        /// Caller role: the link each callee's calls go over (absent while it is being unlinked).
        var byPeer: [String: Link] = [:]
        /// Caller role: the plugin's call id → its call over a link.
        var calls: [UInt64: OutCall] = [:]
        /// Callee role: local id → the link and the caller's id.
        var served: [UInt64: ServedCall] = [:]
        var nextLocal = PeerLinks.localIDs.lowerBound
        /// Caller role: the calls settled per callee since the last report (`linkCalls`).
        var stats: [String: CallHop.Tally] = [:]
        var lastReport: Int64 = 0
        /// No call's deadline is earlier (it may be earlier than the earliest left: the links
        /// thread then wakes, finds nothing due and raises it): no scan of `calls` per call.
        var earliest: Int64 = .max
        /// A link taken back may have settled its last call: looked for after the next wake.
        var settling = false
        /// When the links thread, waiting in poll, wakes by itself (monotonic ns; .max: only for
        /// I/O): a call with an earlier deadline wakes it. `.min` while it is not waiting (it looks
        /// at `earliest` again before it waits): no wake-up then, which would cost a write and a
        /// poll round per call under load.
        var plannedWake: Int64 = .min
        /// Links taken back before their order arrived (the two travel on different sockets):
        /// such an order is closed at once.
        var unlinkedEarly: Set<UInt64> = []
        /// The highest link number an order came for (the supervisor numbers links in order, and
        /// a worker's orders come on one socket): an unlink at or below it is not early.
        var highestOrder: UInt64 = 0
    }

    /// One end of a link.
    final class Link: @unchecked Sendable {
        // @unchecked: the mutable fields are read and written under PeerLinks.state's lock, except
        // `decoder`, `scratch` and `cancelsQueued` (the links thread's alone); writes to `fd` under
        // `sendLock`.
        let number: UInt64
        let peer: String
        let isCaller: Bool
        let fd: Int32
        let timeoutMs: Int
        let sendLock = SendLock()
        /// Closed (under `sendLock`): a writer that took the link just before must not write to a
        /// descriptor number that may already be another's.
        var closed = false
        /// Caller role: still takes new calls (false once unlinked).
        var accepting = true
        /// Caller role: calls sent over it and not yet settled.
        var outstanding = 0
        /// Caller role: the supervisor's `unlink` request to answer once `outstanding` is 0.
        var unlinkReply: UInt64?
        /// Callee role: the caller's id → local id, for `cancel`.
        var served: [UInt64: UInt64] = [:]
        /// Caller role: `cancel`s that found the link full, sent when it has room (the links
        /// thread's alone).
        var cancelsQueued: [UInt64] = []
        /// Frames over the worker's frame limit end the link (as they end a worker at the supervisor).
        var decoder: FrameDecoder
        var scratch = [UInt8](repeating: 0, count: 16 * 1024)

        init(_ order: PeerLinkOrder, fd: Int32, maxBody: Int) {
            number = order.link
            peer = order.peer
            isCaller = order.kind == .caller
            self.fd = fd
            timeoutMs = order.timeoutMs ?? CallTimeouts.defaultMs
            decoder = FrameDecoder(maxBody: maxBody)
        }

        enum Sent { case sent, notSent, broken }

        /// Writes one frame (`header` + `body`): without waiting when `wait` is false and nothing
        /// could be written (the caller then routes it another way); once part of it is written,
        /// waiting up to `sendWaitMs` for room, after which the link is broken.
        func send(header: UInt32, body: UnsafeRawBufferPointer, wait: Bool) -> Sent {
            sendLock.withLock {
                if closed { return .notSent }
                var h = header.bigEndian
                let outcome = withUnsafeBytes(of: &h) { hb in
                    SocketWriter.write(fd, hb, body, wait: .polling(milliseconds: PeerLinks.sendWaitMs, beforeFirstByte: wait))
                }
                switch outcome {
                case .written: return .sent
                case .failed(_, let written): return written == 0 ? .notSent : .broken
                case .full:
                    _ = shutdown(fd, Int32(SHUT_RDWR))
                    return .broken
                }
            }
        }

        func send(frame: [UInt8], wait: Bool) -> Sent {
            frame.withUnsafeBytes { raw in
                send(header: UInt32(raw.count - Frame.headerSize), body: UnsafeRawBufferPointer(rebasing: raw[Frame.headerSize...]), wait: wait)
            }
        }
    }

    private let maxBody: Int
    /// The supervisor's JSON depth limit: a call too deep for it is not sent over a link (the
    /// supervisor then refuses it as it refuses any), and a link that carries one ends.
    private let maxDepth: Int

    /// Nil (and `channel` closed: no links for this worker) without a wake-up eventfd, without
    /// which deadlines and unlinks would wait for unrelated I/O.
    init?(channel: Int32, connection: BlockingConnection, identifier: String, maxBody: Int, maxDepth: Int) {
        let wake = cls_wake_fd()
        guard wake >= 0 else {
            close(channel)
            return nil
        }
        wakeFD = wake
        self.channel = channel
        self.maxBody = maxBody
        self.maxDepth = maxDepth
        self.connection = connection
        self.identifier = identifier
    }

    func start(host: WorkerHost) {
        self.host = host
        Threads.start(name: "links") { [self] in run() }
    }

    /// Whether the send path needs to look at a message at all.
    @inline(__always)
    var active: Bool { linkCount.load(ordering: .relaxed) > 0 || servedEver.load(ordering: .relaxed) }

    /// CLOCK_MONOTONIC in nanoseconds (the histogram's unit).
    static func now() -> Int64 { ProcessControl.monotonicNanoseconds() }

    private func wake() {
        var one: UInt64 = 1
        _ = write(wakeFD, &one, 8)
    }

    // MARK: The plugin's threads

    /// A message the plugin sends: true when it was taken here (a call sent over a link, or a reply
    /// to a call that came over one), false when it goes to the supervisor as usual.
    func intercept(_ bytes: UnsafeRawBufferPointer) -> Bool {
        // Most of what a plugin sends is replies to the supervisor's ids, which the SDK writes
        // `{"type":"reply","id":<digits>`: those are known without a parse.
        if let id = Self.leadingReplyID(bytes), !Self.localIDs.contains(id) { return false }
        guard let env = try? Envelope.parse(bytes, maxDepth: maxDepth), let kind = env.kind, let id = env.id else { return false }
        switch kind {
        case .reply where Self.localIDs.contains(id): replyOverLink(id, env, bytes); return true
        case .call: return callOverLink(id, env, bytes)
        default: return false
        }
    }

    private static let replyPrefix = Array(#"{"type":"reply","id":"#.utf8)

    /// The id of a message that starts `{"type":"reply","id":<digits>,` (nil for any other shape).
    @inline(__always)
    static func leadingReplyID(_ bytes: UnsafeRawBufferPointer) -> UInt64? {
        let n = replyPrefix.count
        guard bytes.count > n + 1, replyPrefix.withUnsafeBytes({ memcmp($0.baseAddress!, bytes.baseAddress!, n) == 0 }) else { return nil }
        var id: UInt64 = 0
        var i = n
        while i < bytes.count, i < n + 19, bytes[i] >= 0x30, bytes[i] <= 0x39 {
            id = id * 10 + UInt64(bytes[i] - 0x30)
            i += 1
        }
        guard i > n, i < bytes.count, bytes[i] == UInt8(ascii: ",") || bytes[i] == UInt8(ascii: "}") else { return nil }
        return id
    }

    private func callOverLink(_ id: UInt64, _ env: Envelope, _ bytes: UnsafeRawBufferPointer) -> Bool {
        guard bytes.count <= Self.largestLinkedCall, let target = Envelope.string(bytes, env.target) else { return false }
        let now = Self.now()
        let taken: (Link, Bool)? = state.withLock { s in
            guard let link = s.byPeer[target], link.accepting, s.calls[id] == nil else { return nil }
            let deadline = now + Int64(CallHop.timeoutMs(requested: env.timeoutMs, otherwise: link.timeoutMs)) * 1_000_000
            s.calls[id] = OutCall(link: link, deadline: deadline, started: now)
            s.earliest = min(s.earliest, deadline)
            link.outstanding += 1
            return (link, deadline < s.plannedWake)
        }
        guard let (link, wakeNeeded) = taken else { return false }
        if wakeNeeded { wake() }
        switch link.send(header: UInt32(bytes.count), body: bytes, wait: false) {
        case .sent:
            return true
        case .notSent:
            // Full or closed: nothing of it went, so the supervisor takes it (and its back-pressure),
            // unless the links thread settled it meanwhile (the link ended, or its deadline passed):
            // the plugin has its answer then, and must not get a second one.
            let reroute = state.withLock { s in
                guard s.calls.removeValue(forKey: id) != nil else { return false }
                link.outstanding -= 1
                s.settling = true  // an unlink may be waiting for this call
                return true
            }
            wake()
            return !reroute
        case .broken:
            // Part of it went: the link is gone; the links thread fails the call as `unavailable`.
            wake()
            return true
        }
    }

    private func replyOverLink(_ id: UInt64, _ env: Envelope, _ bytes: UnsafeRawBufferPointer) {
        let found: ServedCall? = state.withLock { s in
            guard let call = s.served.removeValue(forKey: id) else { return nil }
            call.link.served[call.peerID] = nil
            return call
        }
        // A reply to a call whose caller went away (cancelled): dropped.
        guard let served = found else { return }
        var frame = FrameBuilder(kind: .reply, capacity: bytes.count + 16)
        frame.uint("id", served.peerID)
        frame.answer(of: env, in: bytes)
        // Not sent: the link is closed or broken (the links thread sees it end).
        _ = served.link.send(frame: frame.finish(), wait: true)
    }

    /// `unlink` from the supervisor (on the I/O thread): no new calls over that link; once the
    /// calls on it are settled the links thread closes it and answers.
    func unlink(_ body: UnsafeRawBufferPointer) {
        guard let message = try? ProtocolJSON.decode(UnlinkMessage.self, from: body) else { return }
        let answerNow: Bool = state.withLock { s in
            guard let link = s.links[message.link], link.isCaller else {
                if message.link > s.highestOrder { s.unlinkedEarly.insert(message.link) }
                return true
            }
            link.accepting = false
            link.unlinkReply = message.id
            if s.byPeer[link.peer] === link { s.byPeer[link.peer] = nil }
            s.settling = true
            return false
        }
        if answerNow { answerUnlink(message.id) } else { wake() }
    }

    // MARK: The links thread

    private func run() -> Never {
        var channelOpen = true
        var fds: [pollfd] = []
        var order: [Link] = []
        while true {
            fds.removeAll(keepingCapacity: true)
            order.removeAll(keepingCapacity: true)
            fds.append(pollfd(fd: channelOpen ? channel : -1, events: Int16(POLLIN), revents: 0))
            fds.append(pollfd(fd: wakeFD, events: Int16(POLLIN), revents: 0))
            let (links, wakeAt) = state.withLock { s in
                let reportDue = s.stats.values.contains { !$0.isEmpty } ? s.lastReport + Self.reportEveryNs : Int64.max
                s.plannedWake = min(s.earliest, reportDue)
                return (Array(s.links.values), s.plannedWake)
            }
            for link in links {
                order.append(link)
                fds.append(pollfd(fd: link.fd, events: Int16(link.cancelsQueued.isEmpty ? POLLIN : POLLIN | POLLOUT), revents: 0))
            }
            let now = Self.now()
            let timeout: Int32 = wakeAt == .max ? -1 : Int32(clamping: max(0, (wakeAt - now + 999_999) / 1_000_000))
            let n = fds.withUnsafeMutableBufferPointer { poll($0.baseAddress, nfds_t($0.count), timeout) }
            state.withLock { $0.plannedWake = .min }
            if n < 0, errno != EINTR { fatalLinks("poll: \(String(cString: strerror(errno)))") }
            if n > 0 {
                if fds[1].revents != 0 {
                    var count: UInt64 = 0
                    _ = read(wakeFD, &count, 8)
                }
                if fds[0].revents != 0, !readOrder() { channelOpen = false }
                for (i, link) in order.enumerated() where fds[i + 2].revents != 0 {
                    let r = Int32(fds[i + 2].revents)
                    let ended = r & Int32(POLLHUP | POLLERR | POLLNVAL) != 0
                    // A caller reads to the end what its callee sent before it ended: answered
                    // calls stay answered.
                    if r & Int32(POLLIN) != 0 || ended { readLink(link, toEnd: ended && link.isCaller) }
                    if ended { gone(link) } else if r & Int32(POLLOUT) != 0 { sendQueuedCancels(link) }
                }
            }
            let later = Self.now()
            expire(now: later)
            settleUnlinks()
            report(now: later, force: false)
        }
    }

    private func fatalLinks(_ why: String) -> Never {
        let line = "plugin-worker[\(identifier)]: peer links: \(why)\n"
        _ = line.withCString { write(2, $0, strlen($0)) }
        exit(70)
    }

    /// One order from the supervisor on descriptor 4; false when the channel has ended or broke
    /// (it is closed: no more orders; the links made so far go on).
    private func readOrder() -> Bool {
        var header = [UInt8](repeating: 0, count: 4)
        var fd: Int32 = -1
        let n = header.withUnsafeMutableBytes { cls_receive_with_fd(channel, $0.baseAddress, 4, &fd) }
        if n == -Int(EAGAIN) || n == -Int(EINTR) { return true }
        let length = n == 4 ? try? Frame.bodyLength(b0: header[0], b1: header[1], b2: header[2], b3: header[3], limit: PeerLinkOrder.maxBytes) : nil
        // The supervisor writes an order whole, in one send: the rest is there, or never will be
        // (it gave up on the channel after a short write).
        var body = [UInt8](repeating: 0, count: length ?? 0)
        let got = length.map { length in body.withUnsafeMutableBytes { recv(channel, $0.baseAddress, length, Int32(MSG_DONTWAIT)) } }
        guard let length, got == length else {
            // The stream itself is broken (or ended): no more orders. Closing it frees the
            // sockets of orders still queued in it, whose peers then see their links end, and the
            // supervisor's next order fails (it stops offering links to this worker).
            if fd >= 0 { close(fd) }
            close(channel)
            return false
        }
        guard fd >= 0, let order = try? ProtocolJSON.decode(PeerLinkOrder.self, from: body) else {
            // This order alone is unusable (its socket did not come: this process is at its
            // descriptor limit; or it does not decode): dropped. Its peer sees its link end.
            if fd >= 0 { close(fd) }
            return true
        }
        let link = Link(order, fd: fd, maxBody: maxBody)
        let known: Bool = state.withLock { s in
            s.highestOrder = max(s.highestOrder, link.number)
            let early = s.unlinkedEarly.remove(link.number) != nil
            s.unlinkedEarly = s.unlinkedEarly.filter { $0 > link.number }
            guard !early else { return false }
            s.links[link.number] = link
            guard link.isCaller else { return true }
            // The supervisor makes one link per caller and callee; an older one is being taken back.
            s.byPeer[link.peer]?.accepting = false
            s.byPeer[link.peer] = link
            if s.stats[link.peer] == nil { s.stats[link.peer] = CallHop.Tally() }
            return true
        }
        if known {
            linkCount.add(1, ordering: .relaxed)
            if !link.isCaller { servedEver.store(true, ordering: .relaxed) }
        } else {
            close(fd)  // taken back before it arrived
        }
        return true
    }

    private func answerUnlink(_ id: UInt64) {
        var reply = FrameBuilder(kind: .reply)
        reply.uint("id", id)
        reply.raw("result", Array("null".utf8))
        try? connection.sendFrame(reply.finish())
    }

    /// Frames that arrived on `link`: one read, or with `toEnd` (its peer has closed, so no read
    /// waits) every read until the end of the stream. At the end, or on an error, the link is gone.
    private func readLink(_ link: Link, toEnd: Bool) {
        repeat {
            let n = link.scratch.withUnsafeMutableBytes { read(link.fd, $0.baseAddress, $0.count) }
            if n < 0, errno == EINTR { continue }
            if n < 0, errno == EAGAIN { return }
            if n <= 0 { return gone(link) }
            link.scratch.withUnsafeBytes { link.decoder.append(UnsafeRawBufferPointer(rebasing: $0[0..<n])) }
            do {
                while try link.decoder.next({ body in link.isCaller ? replyArrived(link, body) : callArrived(link, body) }) != nil {}
            } catch {
                return gone(link)
            }
        } while toEnd
    }

    /// Caller role: a reply from the callee's worker.
    private func replyArrived(_ link: Link, _ body: UnsafeRawBufferPointer) {
        guard let env = try? Envelope.parse(body, maxDepth: maxDepth), env.kind == .reply, let id = env.id else {
            _ = shutdown(link.fd, Int32(SHUT_RDWR))
            return
        }
        let call: OutCall? = state.withLock { s in
            guard let call = s.calls[id], call.link === link else { return nil }
            s.calls[id] = nil
            link.outstanding -= 1
            if !link.accepting { s.settling = true }
            record(&s, link, env.error == nil ? .ok : .error, started: call.started)
            return call
        }
        // Late (it timed out): dropped, as the supervisor drops a late reply.
        guard call != nil else { return }
        // Rebuilt as the supervisor rebuilds a reply (Router.replyFrame): the plugin gets only
        // `type`, its id and the answer, whatever else the callee's side wrote.
        var reply = FrameBuilder(kind: .reply, capacity: body.count + 16)
        reply.uint("id", id)
        reply.answer(of: env, in: body)
        host.deliver(frame: reply.finish())
    }

    /// Callee role: a call (or a `cancel`) from the caller's worker.
    private func callArrived(_ link: Link, _ body: UnsafeRawBufferPointer) {
        guard let env = try? Envelope.parse(body, maxDepth: maxDepth), let id = env.id else {
            _ = shutdown(link.fd, Int32(SHUT_RDWR))
            return
        }
        switch env.kind {
        case .call:
            guard Envelope.string(body, env.target) == identifier, Envelope.string(body, env.method) != nil else {
                var reply = FrameBuilder(kind: .reply)
                reply.uint("id", id)
                reply.error(.badRequest, "a call over the link to \(identifier) must name it as its target and have a method")
                _ = link.send(frame: reply.finish(), wait: true)
                return
            }
            let local: UInt64 = state.withLock { s in
                let local = s.nextLocal
                s.nextLocal = local + 1 < Self.localIDs.upperBound ? local + 1 : Self.localIDs.lowerBound
                s.served[local] = ServedCall(link: link, peerID: id)
                link.served[id] = local
                return local
            }
            // Forwarded as the supervisor forwards a call (Router.forward): the same hop.
            var bytes: [UInt8] = []
            bytes.reserveCapacity(CallHop.frameCapacity(forwarding: body.count, from: link.peer) + 32)
            host.deliver(frame: hop.forward(.call, id: local, from: link.peer, env, in: body, into: bytes).frame)
        case .cancel:
            let local: UInt64? = state.withLock { s in
                guard let local = link.served.removeValue(forKey: id) else { return nil }
                s.served[local] = nil
                return local
            }
            if let local { deliverCancel(local) }
        default:
            _ = shutdown(link.fd, Int32(SHUT_RDWR))
        }
    }

    /// The links thread's forwarding rules and trace ids (SPEC §3: a new span id in the caller's
    /// trace, or a new trace); used on that thread only.
    private var hop = CallHop()

    private func deliverCancel(_ local: UInt64) {
        var cancel = FrameBuilder(kind: .cancel)
        cancel.uint("id", local)
        host.deliver(frame: cancel.finish())
    }

    private func deliverError(_ id: UInt64, _ code: ErrorCode, _ message: String) {
        var reply = FrameBuilder(kind: .reply, capacity: message.utf8.count + 64)
        reply.uint("id", id)
        reply.error(code, message)
        host.deliver(frame: reply.finish())
    }

    /// A link that ended (its peer's worker ended, or it broke): its calls are settled as the
    /// supervisor settles calls in a worker that ended (caller role: `unavailable`; callee role:
    /// `cancel` to the plugin), and it is closed.
    private func gone(_ link: Link) {
        let settled: ([UInt64], [UInt64], UInt64?)? = state.withLock { s in
            guard s.links.removeValue(forKey: link.number) != nil else { return nil }
            if s.byPeer[link.peer] === link { s.byPeer[link.peer] = nil }
            var failed: [UInt64] = []
            if link.isCaller {
                for (id, call) in s.calls where call.link === link {
                    failed.append(id)
                    record(&s, link, .unavailable, started: call.started)
                }
                for id in failed { s.calls[id] = nil }
                link.outstanding = 0
            }
            let cancelled = Array(link.served.values)
            for local in cancelled { s.served[local] = nil }
            link.served = [:]
            return (failed.sorted(), cancelled.sorted(), link.unlinkReply)
        }
        // Already closed (a hang-up seen after its end of stream).
        guard let (failed, cancelled, unlinkReply) = settled else { return }
        linkCount.subtract(1, ordering: .relaxed)
        link.sendLock.withLock {
            link.closed = true
            _ = close(link.fd)
        }
        for id in failed { deliverError(id, .unavailable, "the worker of \(link.peer) ended before answering call") }
        for local in cancelled { deliverCancel(local) }
        if let unlinkReply { answerUnlink(unlinkReply) }
        // A caller's link that ended by itself (not taken back) goes in the report: the supervisor
        // may offer a new one.
        report(now: Self.now(), force: true, ended: link.isCaller && unlinkReply == nil ? link : nil)
    }

    /// Caller role: calls past their deadline fail with `timeout`, and the callee is told to `cancel`.
    private func expire(now: Int64) {
        let expired: [(UInt64, Link)] = state.withLock { s in
            guard now >= s.earliest else { return [] }
            var out: [(UInt64, Link)] = []
            var earliest = Int64.max
            for (id, call) in s.calls {
                if call.deadline <= now { out.append((id, call.link)) } else { earliest = min(earliest, call.deadline) }
            }
            s.earliest = earliest
            for (id, link) in out {
                let call = s.calls.removeValue(forKey: id)!
                link.outstanding -= 1
                if !link.accepting { s.settling = true }
                record(&s, link, .timeout, started: call.started)
            }
            return out.sorted { $0.0 < $1.0 }
        }
        for (id, link) in expired {
            deliverError(id, .timeout, "\(link.peer) did not answer call in time")
            link.cancelsQueued.append(id)
            sendQueuedCancels(link)
        }
    }

    /// Sends the `cancel`s waiting for room on `link`, in order, as far as it has room (the rest
    /// when poll says it has more).
    private func sendQueuedCancels(_ link: Link) {
        while let id = link.cancelsQueued.first {
            var cancel = FrameBuilder(kind: .cancel)
            cancel.uint("id", id)
            switch link.send(frame: cancel.finish(), wait: false) {
            case .sent: link.cancelsQueued.removeFirst()
            case .notSent: return
            case .broken:
                link.cancelsQueued = []
                return
            }
        }
    }

    /// Links taken back whose calls are all settled: closed, and the supervisor told (by `gone`).
    private func settleUnlinks() {
        let done: [Link] = state.withLock { s in
            guard s.settling else { return [] }
            s.settling = false
            return s.links.values.filter { $0.isCaller && $0.unlinkReply != nil && $0.outstanding == 0 }
        }
        for link in done { gone(link) }
    }

    /// Counts a settled call (under the state lock).
    private func record(_ s: inout State, _ link: Link, _ outcome: CallHop.Outcome, started: Int64) {
        // In place (a copy out and back would copy the buckets on every call).
        s.stats[link.peer, default: CallHop.Tally()].record(outcome, nanoseconds: Self.now() - started)
    }

    /// Sends the counts gathered since the last report (every `reportEveryNs`, or now), one
    /// `linkCalls` per callee; `ended`'s (a caller's link that ended by itself) says so, even
    /// with nothing to count.
    private func report(now: Int64, force: Bool, ended: Link? = nil) {
        let due: [CallHop.LinkCalls] = state.withLock { s in
            guard force || now >= s.lastReport + Self.reportEveryNs else { return [] }
            var out: [CallHop.LinkCalls] = []
            for (peer, calls) in s.stats where !calls.isEmpty || peer == ended?.peer {
                out.append(CallHop.LinkCalls(target: peer, calls: calls, endedLink: peer == ended?.peer ? ended?.number : nil))
                s.stats[peer] = CallHop.Tally()
            }
            if !out.isEmpty { s.lastReport = now }
            return out
        }
        for report in due {
            guard let frame = try? ProtocolJSON.frame(report) else { continue }
            try? connection.sendFrame(frame)
        }
    }
}

