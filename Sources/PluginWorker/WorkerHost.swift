import CLinuxSupport
import CPluginABI
import CSandboxSupport
import IPC
import LinuxSupport
import PluginProtocol
import Synchronization
#if canImport(Glibc)
import Glibc
#endif

/// The worker's side of the ABI: the `sp_host` the plugin sends through, and delivery of messages
/// into the plugin, one at a time.
final class WorkerHost: Sendable {
    let connection: BlockingConnection
    let maxBody: Int
    /// Serialises `receive` calls: the I/O thread, the links thread and the signal thread all
    /// deliver into the plugin. Holds the `sp_plugin` pointer's bit pattern (0 before `attach` and
    /// after `destroy`). A pthread adaptive mutex (`Guarded`), not Synchronization's `Mutex`, whose
    /// contended path is a priority-inheritance futex: the two delivering threads meet here on
    /// every busy link, and the kernel's rt-mutex path cost more than the deliveries it guarded.
    private let pluginLock = Guarded<Int>(0)
    /// Events the worker raised itself (signals sent to this worker's pid), by id.
    private let localEvents = Mutex<[UInt64: @Sendable () -> Void]>([:])
    private let localPending = Atomic<Int>(0)
    private let nextLocalID = Atomic<UInt64>(1 << 62)
    /// The C struct handed to the plugin; lives as long as the process.
    nonisolated(unsafe) let host: UnsafeMutablePointer<sp_host>
    /// Direct links to other plugins' workers, when the supervisor offers them (PeerLinks.swift).
    let links: PeerLinks?
    /// The payload channel (descriptor 5), where the descriptors of a message's attachments go
    /// just before the message itself, both ways (docs/protocol.md "Bytes"); nil when the
    /// supervisor gave none (bytes then travel inline only).
    let payloadChannel: Int32?
    /// Held across a message's descriptors and the message, so the supervisor reads them in the
    /// same order on the two sockets.
    private let payloadOrder = Mutex(())
    /// The methods the plugin declared idempotent while it was created (`{"type":"idempotent"}`),
    /// for `hello`; nil once `hello` is sent (a later declaration is refused).
    private let declaredIdempotent = Mutex<[String]?>([])

    /// The plugin's `limits.maxPayloadMB` in bytes (WorkerSpec.maxPayloadBytes), nil: none here.
    let maxPayloadBytes: Int?

    init(connection: BlockingConnection, maxBody: Int, links: PeerLinks?, payloadChannel: Int32? = nil, maxPayloadBytes: Int? = nil) {
        self.connection = connection
        self.maxBody = maxBody
        self.maxPayloadBytes = maxPayloadBytes
        self.links = links
        self.payloadChannel = payloadChannel
        host = UnsafeMutablePointer<sp_host>.allocate(capacity: 1)
        host.initialize(to: sp_host(abi_version: UInt32(SP_ABI_VERSION), ctx: nil, send: workerHostSend))
        host.pointee.ctx = Unmanaged.passUnretained(self).toOpaque()
    }

    func attach(_ plugin: UnsafePointer<sp_plugin>) {
        pluginLock.withLock { $0 = Int(bitPattern: plugin) }
    }

    /// Whether a plugin is attached (loaded and created, not yet destroyed).
    var hasPlugin: Bool { pluginLock.withLock { $0 != 0 } }

    /// Hands one message to the plugin. `handingOver` runs just before the plugin's `receive`,
    /// with the plugin's lock held (SPEC §15): a call's taken mark must say it was handed over only
    /// once no other thread is inside the plugin. Marked before the lock, a call that the I/O
    /// thread (or the links thread) took off its socket while the other thread held the plugin
    /// counted as started if that one crashed, though the plugin never had it.
    func deliver(_ bytes: UnsafeRawBufferPointer, handingOver: () -> Void = {}) {
        pluginLock.withLock { bits in
            guard let plugin = UnsafePointer<sp_plugin>(bitPattern: bits), let receive = plugin.pointee.receive else { return }
            handingOver()
            receive(plugin.pointee.ctx, bytes.baseAddress?.assumingMemoryBound(to: UInt8.self), bytes.count)
        }
    }

    /// Hands one message from the supervisor to the plugin, with the descriptors of its attachments
    /// if it lists any (docs/abi.md "Bytes"): they were sent on the payload channel just before it.
    /// Each is checked (a sealed memfd of the announced length) and the message reaches the plugin
    /// with this process's descriptor numbers in place of `true`; the plugin owns them from then on.
    /// `handingOver` as for `deliver` (the request's taken mark).
    func deliverFromSupervisor(_ body: UnsafeRawBufferPointer, handingOver: () -> Void = {}) {
        guard Self.mayHaveAttachments(body), let env = try? Envelope.parse(body), let range = env.attachments,
              var list = try? Attachments.read(body, range), list.contains(where: \.isDescriptor) else { return deliver(body, handingOver: handingOver) }
        var fds = [Int32](repeating: -1, count: Attachments.maxDescriptors)
        var count: Int32 = 0
        var marker: UInt8 = 0
        let n: Int = payloadChannel.map { channel in
            fds.withUnsafeMutableBufferPointer {
                cls_receive_fds_within(channel, &marker, 1, $0.baseAddress, Int32(Attachments.maxDescriptors), &count, 5_000)
            }
        } ?? -Int(EOPNOTSUPP)
        let received = Array(fds.prefix(Int(count)))
        var problem: String?
        if n != 1 {
            problem = n == 0 ? "the payload channel ended"
                : n == -Int(EBADMSG) ? "its descriptors were dropped as they came, as they are when the worker has no descriptor left under its open-files limit (\(ProcessControl.openFilesLimit(raisingTo: 0).soft), limits.openFiles)"
                : "the payload channel: \(String(cString: strerror(Int32(-n))))"
        } else {
            do throws(Attachments.Problem) {
                list = try Attachments.placing(received, in: list) { sp_bytes_check($0, UInt64($1)) }
            } catch {
                problem = error.description
            }
        }
        if let problem {
            for fd in received { close(fd) }
            return undeliverable(env, "its bytes did not arrive: \(problem)")
        }
        if env.kind == .call || env.kind == .open, let why = oversized(list) {
            for fd in received { close(fd) }
            return undeliverable(env, why, code: .badRequest)
        }
        deliver(frame: Attachments.replacing(in: body, env, with: list), handingOver: handingOver)
    }

    /// Why a call's bytes are over its plugin's `limits.maxPayloadMB` (SPEC §13), or nil.
    func oversized(_ list: [Attachment]) -> String? {
        guard let limit = maxPayloadBytes, let big = list.first(where: { $0.length > limit }) else { return nil }
        return "bytes of \(big.length >> 20) MiB, over the plugin's limit of \(limit >> 20) MiB (limits.maxPayloadMB)"
    }

    /// A message whose bytes could not be taken: a call is answered `unavailable` (to the
    /// supervisor; `badRequest` for bytes over the plugin's limit), a reply reaches the plugin as
    /// that error; anything else is dropped.
    private func undeliverable(_ env: Envelope, _ why: String, code: ErrorCode = .unavailable) {
        guard let id = env.id else { return }
        var reply = FrameBuilder(kind: .reply)
        reply.uint("id", id)
        reply.error(code, why)
        switch env.kind {
        case .call?, .open?: try? connection.sendFrame(reply.finish())
        case .reply?: deliver(frame: reply.finish())
        default: break
        }
    }

    /// Hands one frame the worker built itself (length prefix included) to the plugin.
    func deliver(frame: [UInt8], handingOver: () -> Void = {}) {
        frame.withUnsafeBytes { deliver(UnsafeRawBufferPointer(rebasing: $0[Frame.headerSize...]), handingOver: handingOver) }
    }

    /// Calls the plugin's `destroy` once; later deliveries are dropped.
    func destroy() {
        pluginLock.withLock { bits in
            if let p = UnsafePointer<sp_plugin>(bitPattern: bits), let destroy = p.pointee.destroy { destroy(p.pointee.ctx) }
            bits = 0
        }
    }

    /// Delivers an event the worker raised itself and calls `done` when the plugin replies to it.
    func deliverLocalEvent(_ name: EventName, done: @escaping @Sendable () -> Void) {
        let id = nextLocalID.add(1, ordering: .relaxed).newValue
        localEvents.withLock { $0[id] = done }
        localPending.add(1, ordering: .releasing)
        var b = FrameBuilder(kind: .event)
        b.uint("id", id)
        b.string("name", name.rawValue)
        deliver(frame: b.finish())
    }

    /// The plugin's outgoing path (`host->send`).
    func send(_ bytes: UnsafeRawBufferPointer) -> Int32 {
        if bytes.isEmpty { return -EINVAL }
        if bytes.count > maxBody { return -EMSGSIZE }
        if bytes.count > 20, bytes[9] == UInt8(ascii: "i"), let declared = Self.idempotentDeclaration(bytes) { return declare(declared) }
        if localPending.load(ordering: .acquiring) > 0, interceptLocalReply(bytes) { return 0 }
        let attached = Self.mayHaveAttachments(bytes)
        if let links, links.active, links.intercept(bytes, attachments: attached) { return 0 }
        if attached { return sendWithAttachments(bytes) }
        do {
            try connection.sendBody(bytes)
            return 0
        } catch {
            return -error.errno
        }
    }

    private static let attachmentsKey = Array(#""attachments""#.utf8)

    /// Whether the message may list attachments: a search for the member's name (memmem), before
    /// any parse (most messages have none).
    @inline(__always)
    static func mayHaveAttachments(_ bytes: UnsafeRawBufferPointer) -> Bool {
        bytes.count > attachmentsKey.count
            && attachmentsKey.withUnsafeBytes { key in cls_find(bytes.baseAddress, bytes.count, key.baseAddress, key.count) != nil }
    }

    /// A message with bytes attached (docs/abi.md "Bytes"): the descriptors it names go on the
    /// payload channel, then the message. The supervisor checks them (sealed memfds of the
    /// lengths announced, as many as announced) and ends a worker that breaks the rules; here a
    /// message whose attachments do not even parse goes as it is, for the supervisor to refuse.
    /// -EBADF: a number that is no descriptor (nothing sent); -EOPNOTSUPP: descriptors without a
    /// payload channel.
    private func sendWithAttachments(_ bytes: UnsafeRawBufferPointer) -> Int32 {
        var fds: [Int32] = []
        if let env = try? Envelope.parse(bytes), let range = env.attachments, let list = try? Attachments.read(bytes, range) {
            for a in list {
                if case .descriptor(let fd) = a.place { fds.append(fd) }
            }
        }
        guard !fds.isEmpty else {
            do { try connection.sendBody(bytes); return 0 } catch { return -error.errno }
        }
        guard let channel = payloadChannel else { return -EOPNOTSUPP }
        return payloadOrder.withLock { _ -> Int32 in
            var marker = UInt8(ascii: "P")
            let sent = fds.withUnsafeBufferPointer { cls_send_fds(channel, $0.baseAddress, Int32($0.count), &marker, 1) }
            guard sent == 1 else { return sent < 0 ? Int32(sent) : -EIO }
            do {
                try connection.sendBody(bytes)
                return 0
            } catch let error as SystemError {
                return -error.errno
            } catch {
                return -EIO
            }
        }
    }

    /// `takenPage` (docs/protocol.md): the page's descriptor on the payload channel, then the reply
    /// that says it went (`true`), in the order attached bytes go (`payloadOrder`); `false` when
    /// there is no page or no channel to send it on.
    func sendTakenPage(_ descriptor: Int32?, answering id: UInt64) {
        payloadOrder.withLock { _ in
            var sent = false
            if var fd = descriptor, let channel = payloadChannel {
                var marker = UInt8(ascii: "P")
                sent = cls_send_fds(channel, &fd, 1, &marker, 1) == 1
            }
            var reply = FrameBuilder(kind: .reply)
            reply.uint("id", id)
            reply.raw("result", Array((sent ? "true" : "false").utf8))
            try? connection.sendFrame(reply.finish())
        }
    }

    /// `{"type":"idempotent","methods":[...]}`: the names, or nil for any other message.
    private static func idempotentDeclaration(_ bytes: UnsafeRawBufferPointer) -> [String]? {
        guard let env = try? Envelope.parse(bytes), env.kind == .idempotent else { return nil }
        return (try? ProtocolJSON.decode(IdempotentDeclaration.self, from: bytes))?.methods ?? []
    }

    private struct IdempotentDeclaration: Decodable {
        var methods: [String]
    }

    /// Methods a plugin may declare idempotent, and the longest name: `hello` carries them all,
    /// and must stay far below a frame's limit.
    static let mostIdempotent = 1_024
    static let longestMethodName = 256

    /// Keeps a declaration for `hello`: 0; -EINVAL once `hello` is sent (or for no names, or a
    /// name over `longestMethodName` bytes); -E2BIG past `mostIdempotent` names in all.
    private func declare(_ methods: [String]) -> Int32 {
        declaredIdempotent.withLock { declared in
            guard declared != nil, !methods.isEmpty, methods.allSatisfy({ $0.utf8.count <= Self.longestMethodName }) else { return -EINVAL }
            let all = Set(declared!).union(methods.filter { !$0.isEmpty })
            guard all.count <= Self.mostIdempotent else { return -E2BIG }
            declared = Array(all)
            return 0
        }
    }

    /// What the plugin declared idempotent, for `hello`; later declarations are refused.
    func takeIdempotentDeclarations() -> [String] {
        declaredIdempotent.withLock { declared in
            defer { declared = nil }
            return Array(Set(declared ?? [])).sorted()
        }
    }

    private func interceptLocalReply(_ bytes: UnsafeRawBufferPointer) -> Bool {
        guard let env = try? Envelope.parse(bytes), env.kind == .reply, let id = env.id, id >= 1 << 62 else { return false }
        let done = localEvents.withLock { $0.removeValue(forKey: id) }
        if let done {
            localPending.subtract(1, ordering: .releasing)
            done()
        }
        return true
    }
}

/// `sp_host.send`: the C entry point, thread-safe.
private let workerHostSend: @convention(c) (UnsafeMutableRawPointer?, UnsafePointer<UInt8>?, Int) -> Int32 = { ctx, json, len in
    guard let ctx else { return -EINVAL }
    let host = Unmanaged<WorkerHost>.fromOpaque(ctx).takeUnretainedValue()
    guard let json else { return -EINVAL }
    // A size_t past Int.max arrives negative: more than any frame may hold.
    guard len >= 0 else { return -EMSGSIZE }
    return host.send(UnsafeRawBufferPointer(start: json, count: len))
}
