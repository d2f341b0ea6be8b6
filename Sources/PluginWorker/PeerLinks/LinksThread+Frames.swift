import CPluginABI
import LinuxSupport
import PluginProtocol
#if canImport(Glibc)
import Glibc
#endif

/// What arrives over a link, in either role: a caller's replies and stream frames, a callee's
/// calls, cancels and input, each checked as the supervisor checks a worker's frames and rebuilt
/// for the plugin.
extension LinksThread {
    /// Caller role: a reply from the callee's worker, or a stream frame of a call over the link.
    func replyArrived(_ link: LinkTable<LinkSocket>.Polled, _ body: UnsafeRawBufferPointer) {
        guard let env = try? Envelope.parse(body, maxDepth: maxDepth), let id = env.id else {
            return link.socket.shutdown()
        }
        switch env.kind {
        case .reply: break
        case .chunk where !env.input:
            // Checked as the supervisor checks a worker's chunk; one that breaks the rules ends the link.
            if let why = StreamFrames.bytesProblem(of: env, in: body) { return linkBroken(link, why) }
            let element = StreamFrames.element(of: env)
            let now = Self.now()
            switch links.table.withLock({ $0.answerChunk(id, seq: env.seq, hasData: element != nil, on: link.number, now: now) }) {
            case .deliver:
                guard let (range, isBytes) = element else { return }
                let raw = UnsafeRawBufferPointer(rebasing: body[range])
                host.deliver(frame: isBytes ? StreamFrames.bytesChunk(id: id, seq: env.seq ?? 0, bytes: raw, into: [UInt8]())
                                            : StreamFrames.chunk(id: id, seq: env.seq ?? 0, data: raw, into: [UInt8]()))
            case .late: break
            case .violation(let why): linkBroken(link, why)
            }
            return
        case .credit where env.input:
            // Room for more of its input: the plugin's to use (the callee's worker checks it).
            guard let n = env.n, links.table.withLock({ $0.calls[id]?.link == link.number }) else { return }
            host.deliver(frame: StreamFrames.credit(id: id, n: n, input: true, into: [UInt8]()))
            return
        default:
            return link.socket.shutdown()
        }
        // Its bytes are taken (and checked) whether or not the call still waits.
        var attached: [Attachment]?
        switch attachments(env, body, link) {
        case .failure(let why): return linkBroken(link, why)
        case .success(let list): attached = list
        }
        let now = Self.now()
        // Late (it timed out): dropped, as the supervisor drops a late reply.
        guard links.table.withLock({ $0.replied(id, on: link.number, env.error == nil ? .ok : .error, now: now) }) else {
            for fd in Attachments.descriptors(attached ?? []) { close(fd) }
            return
        }
        // Rebuilt as the supervisor rebuilds a reply (Router.replyFrame): the plugin gets only
        // `type`, its id, the answer and its bytes, whatever else the callee's side wrote.
        var reply = FrameBuilder(kind: .reply, into: keptBuffer(capacity: body.count + 48))
        reply.uint("id", id)
        reply.answer(of: env, in: body)
        let frame: [UInt8]
        if let attached {
            reply.attachments(attached)
            frame = reply.finish(tail: env.tail.map { UnsafeRawBufferPointer(rebasing: body[$0]) } ?? UnsafeRawBufferPointer(start: nil, count: 0))
        } else {
            frame = reply.finish()
        }
        host.deliver(frame: frame)
        keep(frame)
    }

    /// The kept buffer (`forwardBuffer`), empty, with room for `capacity` bytes; `keep` gives it back.
    private func keptBuffer(capacity: Int) -> [UInt8] {
        var bytes: [UInt8] = []
        swap(&bytes, &forwardBuffer)
        bytes.removeAll(keepingCapacity: true)
        bytes.reserveCapacity(capacity)
        return bytes
    }

    /// Keeps a delivered frame's storage for the next one (not one grown past 64 KiB).
    private func keep(_ frame: [UInt8]) {
        if frame.capacity <= 64 * 1024 { forwardBuffer = frame }
    }

    /// The bytes a frame over `link` lists (docs/protocol.md "Bytes"), checked as the supervisor
    /// checks a worker's: inline ones as many as announced; descriptors those that came with it on
    /// the link, each a sealed memfd of its announced length, now this process's (the list holds
    /// their numbers). Nil: it lists none. A failure (what came is closed) ends the link.
    private func attachments(_ env: Envelope, _ body: UnsafeRawBufferPointer, _ link: LinkTable<LinkSocket>.Polled) -> Result<[Attachment]?, LinkBreach> {
        let list: [Attachment]
        do throws(Attachments.Problem) {
            guard let announced = try Attachments.announced(in: env, body) else { return .success(nil) }
            list = announced
        } catch {
            return .failure(LinkBreach(error.description))
        }
        let expected = list.filter(\.isDescriptor).count
        guard expected > 0 else { return .success(list) }
        guard let fds = reader(link.socket).take(expected) else { return .failure(LinkBreach("\(expected) descriptors announced, fewer came")) }
        do throws(Attachments.Problem) {
            return .success(try Attachments.placing(fds, in: list) { sp_bytes_check($0, UInt64($1)) })
        } catch {
            for fd in fds { close(fd) }
            return .failure(LinkBreach(error.description))
        }
    }

    /// Callee role: answers the caller's call `id` with `badRequest` (`why`), not handed to the plugin.
    private func refuse(_ id: UInt64, on link: LinkTable<LinkSocket>.Polled, _ why: String) {
        var reply = FrameBuilder(kind: .reply)
        reply.uint("id", id)
        reply.error(.badRequest, why)
        _ = link.socket.send(frame: reply.finish(), wait: true)
    }

    /// Callee role: a call (or a `cancel`) from the caller's worker.
    func callArrived(_ link: LinkTable<LinkSocket>.Polled, _ body: UnsafeRawBufferPointer) {
        guard let env = try? Envelope.parse(body, maxDepth: maxDepth), let id = env.id else {
            return link.socket.shutdown()
        }
        switch env.kind {
        case .call:
            guard names(env.target, in: body), let method = env.method, body[method.lowerBound] == UInt8(ascii: "\"") else {
                return refuse(id, on: link, "a call over the link to \(identifier) must name it as its target and have a method")
            }
            var attached: [Attachment]?
            switch attachments(env, body, link) {
            case .failure(let why): return linkBroken(link, why)
            case .success(let list): attached = list
            }
            // Over the plugin's `limits.maxPayloadMB` (SPEC §13): answered here, not handed to it.
            if let list = attached, let why = host.oversized(list) {
                for fd in Attachments.descriptors(list) { close(fd) }
                return refuse(id, on: link, why)
            }
            let local: UInt64, peer: String, markSlot: Int?
            switch links.table.withLock({ $0.serve(id, on: link.number, input: env.input) }) {
            case .call(let l, let p, let m): (local, peer, markSlot) = (l, p, m)
            case .gone:
                for fd in Attachments.descriptors(attached ?? []) { close(fd) }
                return
            case .tooMany:
                for fd in Attachments.descriptors(attached ?? []) { close(fd) }
                return refuse(id, on: link, "more than \(LinkTable<LinkSocket>.mostServedPerLink) calls of this link are in the plugin already")
            }
            // Forwarded as the supervisor forwards a call (Router.forward): the same hop.
            let bytes = keptBuffer(capacity: CallHop.frameCapacity(forwarding: body.count, from: peer) + 32)
            // A control client's link has no peer plugin: its calls carry no `from`, as through the supervisor.
            let frame = hop.forward(.call, id: local, from: peer.isEmpty ? nil : peer, env, in: body, into: consume bytes).frame
            defer { keep(frame) }
            // The link's mark goes up once the plugin's lock is held, just before `receive`: taken
            // off the link is not started (the I/O thread may be inside the plugin, and it may die there).
            guard let attached else {
                return host.deliver(frame: frame) { if let markSlot { links.marks?.handingOver(linkCall: id, slot: markSlot) } }
            }
            // Its bytes with this process's descriptor numbers.
            frame.withUnsafeBytes { raw in
                let forwarded = UnsafeRawBufferPointer(rebasing: raw[Frame.headerSize...])
                guard let again = try? Envelope.parse(forwarded, maxDepth: maxDepth) else { return }
                host.deliver(frame: Attachments.replacing(in: forwarded, again, with: attached)) {
                    if let markSlot { links.marks?.handingOver(linkCall: id, slot: markSlot) }
                }
            }
        case .cancel:
            if let local = links.table.withLock({ $0.cancelled(id, on: link.number) }) { deliverCancel(local) }
        case .credit where !env.input:
            guard let n = env.n, let local = links.table.withLock({ $0.answerCredit(id, on: link.number) }) else { return }
            host.deliver(frame: StreamFrames.credit(id: local, n: n, into: [UInt8]()))
        case .chunk where env.input:
            if let why = StreamFrames.bytesProblem(of: env, in: body) { return linkBroken(link, why) }
            let element = StreamFrames.element(of: env)
            switch links.table.withLock({ $0.inputChunk(id, seq: env.seq, end: env.end, hasData: element != nil, on: link.number) }) {
            case .deliver(let local):
                if env.end {
                    host.deliver(frame: StreamFrames.inputEnd(id: local, count: env.seq ?? 0, into: [UInt8]()))
                } else if let (range, isBytes) = element {
                    let raw = UnsafeRawBufferPointer(rebasing: body[range])
                    host.deliver(frame: isBytes ? StreamFrames.bytesChunk(id: local, seq: env.seq ?? 0, bytes: raw, input: true, into: [UInt8]())
                                                : StreamFrames.chunk(id: local, seq: env.seq ?? 0, data: raw, input: true, into: [UInt8]()))
                }
            case .late: break
            case .violation(let why): linkBroken(link, why)
            }
        default:
            link.socket.shutdown()
        }
    }

    /// Whether the string at `range` of `body` is this worker's identifier: its bytes as they are,
    /// or decoded when it has escapes.
    private func names(_ range: Range<Int>?, in body: UnsafeRawBufferPointer) -> Bool {
        guard let range else { return false }
        let raw = body[range]
        if raw.count == identifierBytes.count + 2, raw.first == UInt8(ascii: "\""),
           !identifierBytes.isEmpty, identifierBytes.withUnsafeBytes({ memcmp($0.baseAddress!, body.baseAddress! + range.lowerBound + 1, $0.count) == 0 }) { return true }
        return raw.contains(UInt8(ascii: "\\")) && Envelope.string(body, range) == identifier
    }

    /// Why a frame over a link cannot be taken (the link ends, its log line says why).
    struct LinkBreach: Error {
        let reason: String
        init(_ reason: String) { self.reason = reason }
    }

    private func linkBroken(_ link: LinkTable<LinkSocket>.Polled, _ why: LinkBreach) {
        linkBroken(link, why.reason)
    }

    /// A link whose other end broke the rules of streams: it ends (its calls are settled as for
    /// any link that ends), and the supervisor's log says why.
    func linkBroken(_ link: LinkTable<LinkSocket>.Polled, _ why: String) {
        link.socket.shutdown()
        guard let frame = try? ProtocolJSON.frame(LogMessage(level: "warning", message: "peer link \(link.number) ended: \(why)", metadata: nil)) else { return }
        try? links.connection.sendFrame(frame)
    }
}
