#if canImport(Glibc)
import Glibc
#endif
import CLinuxSupport
import CPluginABI
import NIOCore
import PluginProtocol
import SupervisorCore

/// Bytes attached to a worker's message (SPEC §13, docs/protocol.md "Bytes"): inline after its
/// JSON, or sealed memfds the worker sent on its payload channel just before the message. The
/// supervisor checks them as it takes them and passes the descriptors on without reading them.
/// Confined to the event loop with the message it came with.
final class Payload {
    let list: [Attachment]
    /// The received descriptors, in the order of the list's descriptor attachments; owned here
    /// until handed on (`take`) or closed (`deinit`).
    private(set) var descriptors: [Int32]
    /// The inline bytes' range in the message.
    let tail: Range<Int>?

    init(list: [Attachment], descriptors: [Int32], tail: Range<Int>?) {
        self.list = list
        self.descriptors = descriptors
        self.tail = tail
    }

    var hasDescriptors: Bool { !descriptors.isEmpty }

    /// The descriptors, now the caller's to close or hand on.
    func take() -> [Int32] {
        defer { descriptors = [] }
        return descriptors
    }

    deinit {
        for fd in descriptors { close(fd) }
    }
}

extension Router {
    /// The largest payload one attachment may carry (`maxPayloadMB`).
    var maxPayloadBytes: Int { config.maxPayloadMB << 20 }

    /// The bytes `env` announces, taken and checked: nil when it has none; the reason (a protocol
    /// violation) when it breaks the rules: a tail without attachments, inline bytes other than
    /// announced, descriptors that did not come, came in other numbers, or are not sealed memfds
    /// of the announced lengths. Whatever came is closed then.
    func receivePayload(from instance: WorkerInstance, _ env: Envelope, _ bytes: UnsafeRawBufferPointer) -> Result<Payload?, PayloadViolation> {
        let list: [Attachment]
        do throws(Attachments.Problem) {
            guard let announced = try Attachments.announced(in: env, bytes) else { return .success(nil) }
            list = announced
        } catch {
            return .failure(PayloadViolation(error.description))
        }
        let expected = list.filter(\.isDescriptor).count
        guard expected > 0 else { return .success(Payload(list: list, descriptors: [], tail: env.tail)) }
        guard let channel = instance.payloadChannel else {
            return .failure(PayloadViolation("\(expected) descriptors announced, and it has no payload channel"))
        }
        var marker: UInt8 = 0
        var fds = [Int32](repeating: -1, count: Attachments.maxDescriptors)
        var count: Int32 = 0
        let n = fds.withUnsafeMutableBufferPointer { cls_receive_fds(channel, &marker, 1, $0.baseAddress, Int32(Attachments.maxDescriptors), &count) }
        let received = Array(fds.prefix(Int(count)))
        func fail(_ why: String) -> Result<Payload?, PayloadViolation> {
            for fd in received { close(fd) }
            return .failure(PayloadViolation(why))
        }
        if n == -Int(EAGAIN) { return fail("\(expected) descriptors announced, none came on its payload channel") }
        if n == -Int(EBADMSG) { return fail("descriptors dropped on its payload channel (more than \(Attachments.maxDescriptors), or truncated)") }
        guard n == 1 else { return fail("its payload channel failed: \(n < 0 ? String(cString: strerror(Int32(-n))) : "end of stream")") }
        do throws(Attachments.Problem) {
            _ = try Attachments.placing(received, in: list) { sp_bytes_check($0, UInt64($1)) }
        } catch {
            return fail(error.description)
        }
        return .success(Payload(list: list, descriptors: received, tail: env.tail))
    }

    /// Hands `payload`'s descriptors to `instance`'s worker: one byte with them on its payload
    /// channel, where the worker takes them when it reads the message the caller writes next (on
    /// the loop, right after). This process's copies are closed either way. The reason it failed
    /// (the caller is answered with it): no channel, or no room in it (a worker that does not read).
    func handOver(_ payload: Payload, to instance: WorkerInstance) -> ErrorBody? {
        let fds = payload.take()
        defer { for fd in fds { close(fd) } }
        guard !fds.isEmpty else { return nil }
        guard let channel = instance.payloadChannel else {
            return ErrorBody(.unavailable, "\(instance.identifier)'s worker has no payload channel for bytes of more than \(Attachments.inlineLimit >> 10) KiB")
        }
        var marker = UInt8(ascii: "P")
        let n = fds.withUnsafeBufferPointer { cls_send_fds_now(channel, $0.baseAddress, Int32($0.count), &marker, 1) }
        guard n == 1 else {
            return ErrorBody(.unavailable, n == -Int(EAGAIN)
                ? "\(instance.identifier) is not keeping up: its payload channel is full"
                : "\(instance.identifier)'s payload channel failed: \(n < 0 ? String(cString: strerror(Int32(-n))) : "short write")")
        }
        return nil
    }

    /// Writes `payload`'s attachments and inline bytes into `frame` for a worker: descriptors as
    /// `"fd": true` (the worker puts its own numbers in).
    func attachForWorker(_ payload: Payload, to frame: consuming FrameEncoder<ByteBuffer>, _ bytes: UnsafeRawBufferPointer) -> ByteBuffer {
        frame.attachments(Attachments.onTheWire(payload.list))
        let tail = payload.tail.map { UnsafeRawBufferPointer(rebasing: bytes[$0]) } ?? UnsafeRawBufferPointer(start: nil, count: 0)
        return frame.finish(tail: tail)
    }

    /// Why bytes over `maxPayloadMB` are refused (not the worker's fault: the caller is answered).
    func oversized(_ payload: Payload) -> ErrorBody? {
        guard let big = payload.list.first(where: { $0.length > maxPayloadBytes }) else { return nil }
        return ErrorBody(.badRequest, "bytes of \(big.length) bytes, over the \(maxPayloadBytes) bytes (\(config.maxPayloadMB) MiB) of maxPayloadMB")
    }

    /// Writes `frame`'s attachments and inline bytes to a control client: each descriptor becomes
    /// a token for the handoff socket (`LinkHandoff.offer`, the same one-time pick-up as a link's
    /// end). False when there is no handoff socket (the descriptors are closed).
    func attach(_ payload: Payload, to frame: consuming FrameEncoder<ByteBuffer>, _ bytes: UnsafeRawBufferPointer,
                for connection: ControlConnection) -> ByteBuffer? {
        var list = payload.list
        if payload.hasDescriptors {
            guard let handoff = shared.handoff else { return nil }
            var fds = payload.take()[...]
            for i in list.indices where list[i].isDescriptor {
                list[i].place = .token(handoff.offer(fds.removeFirst(), link: 0, to: ObjectIdentifier(connection)))
            }
        }
        frame.attachments(list)
        let tail = payload.tail.map { UnsafeRawBufferPointer(rebasing: bytes[$0]) } ?? UnsafeRawBufferPointer(start: nil, count: 0)
        return frame.finish(tail: tail)
    }
}

/// A protocol violation's reason, from the bytes of a worker's message.
struct PayloadViolation: Error {
    let reason: String
    init(_ reason: String) { self.reason = reason }
}
