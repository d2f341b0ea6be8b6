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
/// calls what the supervisor does for the others, by the same rules (`CallHop`):
/// - as the caller's worker: each call's deadline (the call's own `timeoutMs`, else the callee's
///   timeout the supervisor gave with the link), `timeout` and `cancel` when it passes, the
///   calls in flight when the callee's worker ends sent again through the supervisor (SPEC §15:
///   it replays what the callee's plugin never had), and the call metrics (`linkCalls` reports
///   to the supervisor);
/// - as the callee's worker: ids (each link's ids are mapped into a range of this worker's own,
///   `LinkTable.localIDs`), `from`, a `traceparent` hop, and `cancel` for the calls of a caller
///   that ended.
/// The supervisor makes every link (only towards a declared dependency), hands its ends over the
/// descriptor channel, and takes it back before a planned stop of the callee (`unlink`, on the
/// protocol socket, SPEC §8). Only the caller's worker closes a link on purpose (once it was taken
/// back and its calls are settled); the callee's worker serves until its end closes, then cancels
/// what is left (calls whose caller gave up on them).
///
/// The state is a `LinkTable` behind one lock; each link's socket is a `LinkSocket`. The plugin's
/// own threads send calls and replies here (`intercept`); one thread (`links`, LinksThread.swift)
/// polls the descriptor channel, every link and a wake-up eventfd, delivers what arrives into the
/// plugin, and keeps the deadlines, unlinks and reports.
final class PeerLinks: Sendable {
    /// The descriptor channel, kept open for the supervisor's orders.
    let channel: Int32
    let wakeFD: Int32
    let connection: BlockingConnection
    let identifier: String
    let table = Mutex(LinkTable<LinkSocket>())
    /// Links open (either role): the send path looks at nothing else when there are none, unless
    /// calls were ever served over one (a late reply to one must still be caught: its id means
    /// nothing to the supervisor, which would end this worker for it).
    let linkCount = Atomic<Int>(0)
    let servedEver = Atomic<Bool>(false)

    /// A call larger than this goes through the supervisor (a link's socket buffer is small).
    static let largestLinkedCall = 64 * 1024

    let maxBody: Int
    /// The supervisor's JSON depth limit: a call too deep for it is not sent over a link (the
    /// supervisor then refuses it as it refuses any), and a link that carries one ends.
    let maxDepth: Int
    /// The taken page (SPEC §15): callee role, each link's mark (`PeerLinkOrder.markSlot`) goes up
    /// as its calls are handed to the plugin.
    let marks: TakenPage?

    /// Nil (and `channel` closed: no links for this worker) without a wake-up eventfd, without
    /// which deadlines and unlinks would wait for unrelated I/O.
    init?(channel: Int32, connection: BlockingConnection, identifier: String, maxBody: Int, maxDepth: Int, marks: TakenPage?) {
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
        self.marks = marks
    }

    /// Starts the links thread, which delivers into `host`.
    func start(host: WorkerHost) {
        Threads.start(name: "links") { [self] in LinksThread(links: self, host: host).run() }
    }

    /// Whether the send path needs to look at a message at all.
    @inline(__always)
    var active: Bool { linkCount.load(ordering: .relaxed) > 0 || servedEver.load(ordering: .relaxed) }

    /// CLOCK_MONOTONIC in nanoseconds (the histogram's unit).
    static func now() -> Int64 { ProcessControl.monotonicNanoseconds() }

    func wake() {
        var one: UInt64 = 1
        _ = write(wakeFD, &one, 8)
    }

    // MARK: The plugin's threads

    /// A message the plugin sends: true when it was taken here (a call sent over a link, or a reply
    /// to a call that came over one), false when it goes to the supervisor as usual.
    /// `attachments`: the message may carry bytes (docs/protocol.md "Bytes"): a call with them goes
    /// through the supervisor, which passes descriptors on; an answer with them to a call that
    /// came over a link goes back over the link, its descriptors passed along; a stream's chunk
    /// with its inline bytes goes as any chunk does.
    func intercept(_ bytes: UnsafeRawBufferPointer, attachments: Bool = false) -> Bool {
        // Most of what a plugin sends is replies to the supervisor's ids, which the SDK writes
        // `{"type":"reply","id":<digits>`: those are known without a parse.
        let leading = Self.leadingReplyID(bytes)
        if let id = leading?.id, !LinkTable<LinkSocket>.localIDs.contains(id) { return false }
        guard let env = try? Envelope.parse(bytes, maxDepth: maxDepth), let kind = env.kind, let id = env.id else { return false }
        if attachments, env.attachments != nil, kind != .chunk {
            guard LinkTable<LinkSocket>.localIDs.contains(id) else { return false }
            if kind == .reply { replyWithBytesOverLink(id, env, bytes) }
            return true
        }
        switch kind {
        case .reply where LinkTable<LinkSocket>.localIDs.contains(id):
            // The SDK's shape, with its one `id` first: passed on as written after the id.
            let rest = leading.flatMap { env.idValue?.upperBound == $0.idEnd && env.attachments == nil && env.tail == nil ? $0.idEnd : nil }
            replyOverLink(id, env, bytes, restAt: rest)
            return true
        case .call: return callOverLink(id, env, bytes)
        case .chunk, .credit, .cancel: return streamOverLink(kind, id, env, bytes)
        default: return false
        }
    }

    /// A stream frame of a call over a link (docs/protocol.md "Streams"): as the callee, a chunk of
    /// an answer or credit for an input (local ids, rewritten to the caller's); as the caller,
    /// credit for an answer, a chunk of an input, or a `cancel`. False: not a call over a link
    /// (it goes to the supervisor).
    private func streamOverLink(_ kind: MessageKind, _ id: UInt64, _ env: Envelope, _ bytes: UnsafeRawBufferPointer) -> Bool {
        if LinkTable<LinkSocket>.localIDs.contains(id) {
            let grant = kind == .credit && env.input ? env.n : nil
            guard kind == .chunk && !env.input || grant != nil else { return true }  // nothing else is the callee's to send
            // Its caller went away: dropped.
            guard let call = table.withLock({ $0.streamOut(id, inputCredit: grant) }) else { return true }
            let frame: [UInt8]
            if let grant {
                frame = StreamFrames.credit(id: call.peerID, n: grant, input: true, into: [UInt8]())
            } else {
                guard let (element, isBytes) = StreamFrames.element(of: env) else { return true }
                let raw = UnsafeRawBufferPointer(rebasing: bytes[element])
                frame = isBytes ? StreamFrames.bytesChunk(id: call.peerID, seq: env.seq ?? 0, bytes: raw, into: [UInt8]())
                                : StreamFrames.chunk(id: call.peerID, seq: env.seq ?? 0, data: raw, into: [UInt8]())
            }
            _ = call.socket.send(frame: frame, wait: true)
            return true
        }
        let now = Self.now()
        let socket: LinkSocket? = table.withLock { t in
            switch kind {
            case .credit where !env.input: return env.n.flatMap { t.grantAnswer(id, n: $0) }
            case .chunk where env.input: return t.inputOut(id, end: env.end, now: now)
            case .cancel: return t.cancelOut(id)
            default: return nil
            }
        }
        guard let socket else { return false }
        if kind == .cancel { wake() }  // an unlink may be waiting for this call
        // Sent as the plugin wrote it: the ids on a link are the caller's. Not sent: the link is
        // closed or broken (the links thread sees it end and fails the call).
        _ = socket.send(header: UInt32(bytes.count), body: bytes, wait: true)
        return true
    }

    private static let replyPrefix = Array(#"{"type":"reply","id":"#.utf8)

    /// The id of a message that starts `{"type":"reply","id":<digits>,` and where its digits end
    /// (nil for any other shape).
    @inline(__always)
    static func leadingReplyID(_ bytes: UnsafeRawBufferPointer) -> (id: UInt64, idEnd: Int)? {
        let n = replyPrefix.count
        guard bytes.count > n + 1, replyPrefix.withUnsafeBytes({ memcmp($0.baseAddress!, bytes.baseAddress!, n) == 0 }) else { return nil }
        var id: UInt64 = 0
        var i = n
        while i < bytes.count, i < n + 19, bytes[i] >= 0x30, bytes[i] <= 0x39 {
            id = id * 10 + UInt64(bytes[i] - 0x30)
            i += 1
        }
        guard i > n, i < bytes.count, bytes[i] == UInt8(ascii: ",") || bytes[i] == UInt8(ascii: "}") else { return nil }
        return (id, i)
    }

    private func callOverLink(_ id: UInt64, _ env: Envelope, _ bytes: UnsafeRawBufferPointer) -> Bool {
        guard bytes.count <= Self.largestLinkedCall, let target = Envelope.string(bytes, env.target) else { return false }
        let now = Self.now()
        // Kept to go again through the supervisor if the callee dies with it before answering
        // (not a call with an input: the chunks it sends are not kept).
        let written = env.input ? nil : Array(bytes)
        guard let (socket, wakeNeeded) = table.withLock({
            $0.callOut(id, to: target, requestedMs: env.timeoutMs, now: now, stream: env.stream, input: env.input, written: written)
        }) else { return false }
        if wakeNeeded { wake() }
        switch socket.send(header: UInt32(bytes.count), body: bytes, wait: false) {
        case .sent:
            return true
        case .notSent:
            // Full or closed: nothing of it went, so the supervisor takes it (and its back-pressure),
            // unless the links thread settled it meanwhile (the link ended, or its deadline passed):
            // the plugin has its answer then, and must not get a second one.
            let reroute = table.withLock { $0.unsent(id) }
            wake()
            return !reroute
        case .broken:
            // Part of it went: the link is gone; the links thread fails the call as `unavailable`.
            wake()
            return true
        }
    }

    /// A plugin answered a call that came over a link with bytes: the reply goes back over the
    /// link with its inline bytes and its descriptors passed along (the plugin keeps its copies,
    /// as with `host->send`). Attachments that do not parse, or a number that is no descriptor,
    /// answer the caller `pluginError` instead, saying why.
    private func replyWithBytesOverLink(_ id: UInt64, _ env: Envelope, _ bytes: UnsafeRawBufferPointer) {
        guard let served = table.withLock({ $0.answered(id) }) else { return }
        var frame = FrameBuilder(kind: .reply, capacity: bytes.count + 64)
        frame.uint("id", served.peerID)
        guard let range = env.attachments, let list = try? Attachments.read(bytes, range), Attachments.inlineCount(list) == env.tail?.count ?? 0 else {
            frame.error(.pluginError, "\(identifier) answered with attachments that do not match its bytes")
            _ = served.socket.send(frame: frame.finish(), wait: true)
            return
        }
        frame.answer(of: env, in: bytes)
        frame.attachments(Attachments.onTheWire(list))
        let tail = env.tail.map { UnsafeRawBufferPointer(rebasing: bytes[$0]) } ?? UnsafeRawBufferPointer(start: nil, count: 0)
        if served.socket.send(frame: frame.finish(tail: tail), descriptors: Attachments.descriptors(list)) == .notSent {
            var refused = FrameBuilder(kind: .reply)
            refused.uint("id", served.peerID)
            refused.error(.pluginError, "\(identifier) answered with bytes whose descriptors could not be passed on")
            _ = served.socket.send(frame: refused.finish(), wait: true)
        }
    }

    /// `restAt`: where the reply's bytes after its (only) `id` start, when it begins as the SDK
    /// writes a reply: it goes on as written, the caller's id in place of the local one, without
    /// a frame of its own (the caller's side takes `result` or `error` from it, as from any reply).
    private func replyOverLink(_ id: UInt64, _ env: Envelope, _ bytes: UnsafeRawBufferPointer, restAt: Int?) {
        // A reply to a call whose caller went away (cancelled): dropped.
        guard let served = table.withLock({ $0.answered(id) }) else { return }
        if let restAt {
            let rest = UnsafeRawBufferPointer(rebasing: bytes[restAt...])
            // Not sent: the link is closed or broken (the links thread sees it end).
            _ = Frame.withHead(.reply, id: served.peerID, restCount: rest.count) { served.socket.send(head: $0, body: rest, wait: true) }
            return
        }
        var frame = FrameBuilder(kind: .reply, capacity: bytes.count + 16)
        frame.uint("id", served.peerID)
        frame.answer(of: env, in: bytes)
        // Not sent: the link is closed or broken (the links thread sees it end).
        _ = served.socket.send(frame: frame.finish(), wait: true)
    }

    /// `unlink` from the supervisor (on the I/O thread): no new calls over that link; once the
    /// calls on it are settled the links thread closes it and answers.
    func unlink(_ body: UnsafeRawBufferPointer) {
        guard let message = try? ProtocolJSON.decode(UnlinkMessage.self, from: body) else { return }
        if table.withLock({ $0.unlink(message) }) { answerUnlink(message.id) } else { wake() }
    }

    // MARK: Answers

    func answerUnlink(_ id: UInt64) {
        var reply = FrameBuilder(kind: .reply)
        reply.uint("id", id)
        reply.raw("result", Array("null".utf8))
        try? connection.sendFrame(reply.finish())
    }
}
