import CLinuxSupport
import CPluginABI
import IPC
import LinuxSupport
import PluginProtocol
import Synchronization
#if canImport(Glibc)
import Glibc
#endif

/// The links thread: one poll over the descriptor channel (the supervisor's link orders), the
/// wake-up eventfd and every link; what arrives is delivered into the plugin, and after each wake
/// the deadlines, the settled unlinks and the reports (every 250 ms while there are calls to count).
///
/// What only this thread uses is its own, and not `Sendable`: the plugin's side (`host`, into which
/// it delivers), the forwarding rules (`hop`) and each link's reader. What the plugin's threads
/// share with it is in `PeerLinks` (the table behind its lock, the sockets).
final class LinksThread {
    let links: PeerLinks
    let host: WorkerHost
    /// The forwarding rules and trace ids (SPEC §3: a new span id in the caller's trace, or a new trace).
    var hop = CallHop()
    /// Each open link's reader, by its socket: made on the link's first poll (`reader`), dropped when it is gone.
    var readers: [ObjectIdentifier: LinkReader] = [:]
    /// The buffer a call or a reply that came over a link is rebuilt in for the plugin, kept from
    /// one to the next (the plugin has the bytes only during `receive`: docs/abi.md).
    var forwardBuffer: [UInt8] = []
    /// This worker's identifier as the bytes a call over a link names it with.
    let identifierBytes: [UInt8]

    init(links: PeerLinks, host: WorkerHost) {
        self.links = links
        self.host = host
        identifierBytes = Array(links.identifier.utf8)
    }

    private var channel: Int32 { links.channel }
    var identifier: String { links.identifier }
    var maxDepth: Int { links.maxDepth }
    static func now() -> Int64 { PeerLinks.now() }

    func reader(_ socket: LinkSocket) -> LinkReader {
        if let reader = readers[ObjectIdentifier(socket)] { return reader }
        let reader = LinkReader(socket, maxBody: links.maxBody)
        readers[ObjectIdentifier(socket)] = reader
        return reader
    }

    func run() -> Never {
        var channelOpen = true
        var fds: [pollfd] = []
        var polled: [LinkTable<LinkSocket>.Polled] = []
        while true {
            fds.removeAll(keepingCapacity: true)
            polled.removeAll(keepingCapacity: true)
            fds.append(pollfd(fd: channelOpen ? channel : -1, events: Int16(POLLIN), revents: 0))
            fds.append(pollfd(fd: links.wakeFD, events: Int16(POLLIN), revents: 0))
            let wakeAt = links.table.withLock { $0.waiting(polled: &polled) }
            for link in polled {
                fds.append(pollfd(fd: link.socket.fd, events: Int16(reader(link.socket).cancelsQueued.isEmpty ? POLLIN : POLLIN | POLLOUT), revents: 0))
            }
            let now = Self.now()
            let timeout: Int32 = wakeAt == .max ? -1 : Int32(clamping: max(0, (wakeAt - now + 999_999) / 1_000_000))
            let n = fds.withUnsafeMutableBufferPointer { poll($0.baseAddress, nfds_t($0.count), timeout) }
            links.table.withLock { $0.awake() }
            if n < 0, errno != EINTR { fatalLinks("poll: \(String(cString: strerror(errno)))") }
            if n > 0 {
                if fds[1].revents != 0 {
                    var count: UInt64 = 0
                    _ = read(links.wakeFD, &count, 8)
                }
                if fds[0].revents != 0, !readOrder() { channelOpen = false }
                for (i, link) in polled.enumerated() where fds[i + 2].revents != 0 {
                    let r = Int32(fds[i + 2].revents)
                    let ended = r & Int32(POLLHUP | POLLERR | POLLNVAL) != 0
                    // A caller reads to the end what its callee sent before it ended: answered
                    // calls stay answered.
                    if r & Int32(POLLIN) != 0 || ended { readLink(link, toEnd: ended && link.isCaller) }
                    if ended { gone(link.number) } else if r & Int32(POLLOUT) != 0 { sendQueuedCancels(reader(link.socket)) }
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

    /// One order from the supervisor on the descriptor channel; false when the channel has ended
    /// or broke (it is closed: no more orders; the links made so far go on).
    private func readOrder() -> Bool {
        var header = [UInt8](repeating: 0, count: 4)
        var fd: Int32 = -1
        // At this process's open-files limit the order's socket is dropped on the way in: that
        // order alone is lost (below), not the channel.
        var truncated: Int32 = 0
        let n = header.withUnsafeMutableBytes { cls_receive_with_fd_noting(channel, $0.baseAddress, 4, &fd, &truncated) }
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
        let socket = LinkSocket(fd: fd)
        // Before any call of the link can be read (they come on its socket, handed with the order).
        if order.kind == .callee, let slot = order.markSlot { links.marks?.clear(slot: slot) }
        if links.table.withLock({ $0.add(order, socket: socket) }) {
            links.linkCount.add(1, ordering: .relaxed)
            if order.kind == .callee { links.servedEver.store(true, ordering: .relaxed) }
        } else {
            socket.close()  // taken back before it arrived
        }
        return true
    }

    /// Frames that arrived on `link`: one read, or with `toEnd` (its peer has closed, so no read
    /// waits) every read until the end of the stream. At the end, or on an error, the link is gone.
    /// Callee role: the replies the plugin writes on this thread while it takes the calls of one
    /// read are held and go out together once they are delivered (`LinkSocket.holdWrites`).
    private func readLink(_ link: LinkTable<LinkSocket>.Polled, toEnd: Bool) {
        let reader = reader(link.socket)
        let holds = !link.isCaller
        repeat {
            switch reader.read() {
            case .none: return
            case .end: return gone(link.number)
            case .some: break
            }
            if holds { link.socket.holdWrites() }
            do {
                while try reader.decoder.next({ body in
                    if link.isCaller { return replyArrived(link, body) }
                    link.socket.sendHeld(stopHolding: false)
                    callArrived(link, body)
                }) != nil {}
            } catch {
                if holds { link.socket.sendHeld(stopHolding: true) }
                return gone(link.number)
            }
            if holds { link.socket.sendHeld(stopHolding: true) }
            guard reader.settleDescriptors(partialFrame: reader.decoder.bufferedCount > 0 || reader.decoder.state != .waitingForHeader) else {
                return linkBroken(link, "descriptors came that no frame announced")
            }
        } while toEnd
    }

    /// A link that ended (its peer's worker ended, it broke, or it was taken back and its calls
    /// are settled): its calls are settled as the supervisor settles calls in a worker that ended
    /// (caller role: each plain call goes again through the supervisor, which read the link's
    /// mark at the callee's death and decides, SPEC §15, a stream call none of whose answer came
    /// too; one that had begun answering or had an input fails `unavailable`; callee
    /// role: `cancel` to the plugin), and it is closed.
    private func gone(_ number: UInt64) {
        let now = Self.now()
        // Nil: already closed (a hang-up seen after its end of stream).
        guard let gone = links.table.withLock({ $0.remove(number, now: now) }) else { return }
        links.linkCount.subtract(1, ordering: .relaxed)
        readers[ObjectIdentifier(gone.socket)] = nil
        gone.socket.close()
        for call in gone.sentAgain { sendAgain(call, after: number, to: gone.peer, now: now) }
        for (id, started) in gone.failed {
            deliverError(id, .unavailable, started ? "the worker of \(gone.peer) ended while its stream answered call; part of the answer came, so it is not run again"
                                                   : "the worker of \(gone.peer) ended before answering call", started: started)
        }
        for local in gone.cancelled { deliverCancel(local) }
        if let reply = gone.unlinkReply { links.answerUnlink(reply) }
        // A caller's link that ended by itself (not taken back) goes in the report: the supervisor
        // may offer a new one.
        report(now: Self.now(), force: true, ended: gone.isCaller && gone.unlinkReply == nil ? (gone.peer, number) : nil)
    }

    /// Caller role: a call in flight on link `number` when it ended goes to the supervisor as the
    /// plugin wrote it, naming where it was (`"afterLink": {"link": N, "id": X}`) with what is left
    /// of its time: the supervisor replays it if the callee's plugin never had it, retries it if
    /// idempotent, else answers it (`started: true`), to the plugin's own id. Unless its time is up
    /// (`timeout`) or the supervisor's socket is gone (`unavailable`).
    private func sendAgain(_ call: LinkTable<LinkSocket>.SentAgain, after number: UInt64, to peer: String, now: Int64) {
        let leftMs = (call.deadline - now) / 1_000_000
        guard leftMs > 0 else { return deliverError(call.id, .timeout, "\(peer) did not answer call in time") }
        call.written.withUnsafeBytes { bytes in
            guard let env = try? Envelope.parse(bytes, maxDepth: maxDepth), let target = env.target, let method = env.method else {
                return deliverError(call.id, .unavailable, "the worker of \(peer) ended before answering call")
            }
            var frame = FrameBuilder(kind: .call, capacity: bytes.count + 64)
            frame.uint("id", call.id)
            frame.raw("target", UnsafeRawBufferPointer(rebasing: bytes[target]))
            frame.raw("method", UnsafeRawBufferPointer(rebasing: bytes[method]))
            if let params = env.params { frame.raw("params", UnsafeRawBufferPointer(rebasing: bytes[params])) }
            if let trace = env.traceparent { frame.raw("traceparent", UnsafeRawBufferPointer(rebasing: bytes[trace])) }
            // A stream of answers none of which came: its answer comes through the supervisor now.
            if env.stream { frame.flag("stream") }
            frame.uint("timeoutMs", UInt64(leftMs))
            frame.raw("afterLink", AfterLink(link: number, id: call.id).json)
            do { try links.connection.sendFrame(frame.finish()) } catch {
                deliverError(call.id, .unavailable, "the worker of \(peer) ended before answering call, and the supervisor cannot be reached")
            }
        }
    }

    /// Caller role: calls past their deadline fail with `timeout`, and the callee is told to `cancel`.
    private func expire(now: Int64) {
        for call in links.table.withLock({ $0.expire(now: now) }) {
            deliverError(call.id, .timeout, call.idleMs.map { "the stream of \(call.peer) moved no chunk for \($0) ms (streamIdleTimeoutMs): its reader took none or its producer sent none" }
                ?? "\(call.peer) did not answer call in time")
            let reader = reader(call.socket)
            reader.cancelsQueued.append(call.id)
            sendQueuedCancels(reader)
        }
    }

    /// Sends the `cancel`s waiting for room on `socket`, in order, as far as it has room (the rest
    /// when poll says it has more).
    private func sendQueuedCancels(_ reader: LinkReader) {
        let socket = reader.socket
        while let id = reader.cancelsQueued.first {
            var cancel = FrameBuilder(kind: .cancel)
            cancel.uint("id", id)
            switch socket.send(frame: cancel.finish(), wait: false) {
            case .sent: reader.cancelsQueued.removeFirst()
            case .notSent: return
            case .broken:
                reader.cancelsQueued = []
                return
            }
        }
    }

    /// Links taken back whose calls are all settled: closed, and the supervisor told (by `gone`).
    private func settleUnlinks() {
        for number in links.table.withLock({ $0.unlinksSettled() }) { gone(number) }
    }

    /// Sends the `linkCalls` reports due (`LinkTable.reports`).
    private func report(now: Int64, force: Bool, ended: (peer: String, number: UInt64)? = nil) {
        for report in links.table.withLock({ $0.reports(now: now, force: force, ended: ended) }) {
            guard let frame = try? ProtocolJSON.frame(report) else { continue }
            try? links.connection.sendFrame(frame)
        }
    }

    func deliverCancel(_ local: UInt64) {
        var cancel = FrameBuilder(kind: .cancel)
        cancel.uint("id", local)
        host.deliver(frame: cancel.finish())
    }

    func deliverError(_ id: UInt64, _ code: ErrorCode, _ message: String, started: Bool = false) {
        var reply = FrameBuilder(kind: .reply, capacity: message.utf8.count + 64)
        reply.uint("id", id)
        reply.error(code: code.rawValue, message, started: started)
        host.deliver(frame: reply.finish())
    }
}
