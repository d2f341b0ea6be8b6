#if canImport(Glibc)
import Glibc
#endif
import CLinuxSupport
import IPC
import LinuxSupport
import PluginProtocol
import Synchronization

/// One end of a peer link: its socket, written by any thread (frames whole, under `sendLock`,
/// with IPC's `SocketWriter`) and read by the links thread (with its `LinkReader`). Owns the
/// descriptor: `close()`.
final class LinkSocket: Sendable {
    let fd: Int32
    let sendLock = SendLock()
    /// Closed (set under `sendLock`, read under it): a writer that took the link just before must
    /// not write to a descriptor number that may already be another's. Atomic only so the compiler
    /// can see it is safe to share; the lock orders it.
    private let closed = Atomic<Bool>(false)

    /// How long a reply may wait for room on a link before the link is given up.
    static let sendWaitMs: Int32 = 1000

    /// The thread whose writes are held now (`holdWrites`): the links thread while it delivers
    /// the calls of one read from this link; 0: none.
    private let holdingThread = Atomic<Int32>(0)
    /// When the first of the frames held now was held; guarded by `sendLock` (which keeps the
    /// held frames themselves, where a fatal signal's reporter finds them: `cls_link_hold_set`).
    private nonisolated(unsafe) var heldSince: Int64 = 0

    init(fd: Int32) {
        self.fd = fd
    }

    enum Sent { case sent, notSent, broken }

    // MARK: Held replies (the links thread, callee role)

    /// From now until `sendHeld(stopHolding: true)`, the replies the calling thread writes on this
    /// link (writes that wait for room) are held and go out in one write, by the protocol socket's
    /// limits (`BlockingConnection.heldBytesLimit`, `heldNanosecondsLimit`): a read's worth of calls
    /// answered on the links thread costs one system call and one wake-up of the caller instead
    /// of one per reply (the worker's protocol socket does the same: `BlockingConnection`'s
    /// `holdWritesWhileDelivering`). Other threads' writes send what is held first, in the same
    /// write, so frames stay in the order they were written. A fatal signal's reporter and the
    /// exit handler send what is held before the process ends.
    func holdWrites() {
        holdingThread.store(cls_thread_id(), ordering: .relaxed)
        cls_link_hold_set(sendLock.pointer, fd)
    }

    /// Sends what is held: always with `stopHolding` (which also ends the holding), otherwise only
    /// once the first held reply has waited `BlockingConnection.heldNanosecondsLimit` (a slow
    /// handler delays the replies before it in the same read by no more than its own run).
    func sendHeld(stopHolding: Bool) {
        if stopHolding {
            holdingThread.store(0, ordering: .relaxed)
            cls_link_hold_set(nil, -1)
        }
        sendLock.withLock {
            guard sendLock.pointer.pointee.held_len > 0 else { return }
            if !stopHolding, ProcessControl.monotonicNanoseconds() - heldSince < BlockingConnection.heldNanosecondsLimit { return }
            _ = writeHeld()
        }
    }

    /// Writes the held frames (under `sendLock`), waiting for room as a reply does: false when the
    /// link broke (shut down). They are gone afterwards, written or not.
    private func writeHeld() -> Bool {
        let lock = sendLock.pointer
        guard lock.pointee.held_len > 0 else { return true }
        defer { lock.pointee.held_len = 0 }
        if closed.load(ordering: .relaxed) { return false }
        let held = UnsafeRawBufferPointer(start: lock.pointee.held, count: lock.pointee.held_len)
        if SocketWriter.write(fd, held, UnsafeRawBufferPointer(start: nil, count: 0), wait: .polling(milliseconds: Self.sendWaitMs, beforeFirstByte: true)) == .written {
            return true
        }
        _ = Glibc.shutdown(fd, Int32(SHUT_RDWR))
        return false
    }

    /// Writes one frame (`header` + `body`): without waiting when `wait` is false and nothing
    /// could be written (the caller then routes it another way); once part of it is written,
    /// waiting up to `sendWaitMs` for room, after which the link is broken (shut down: the links
    /// thread sees it end). A frame that waits, from the thread holding writes, is held instead.
    func send(header: UInt32, body: UnsafeRawBufferPointer, wait: Bool) -> Sent {
        var h = header.bigEndian
        return withUnsafeBytes(of: &h) { send(head: $0, body: body, wait: wait) }
    }

    /// Writes one frame given in two parts: `head` (its length prefix and the first bytes of its
    /// body) and `body` (the rest), as `send(header:body:wait:)` does.
    func send(head: UnsafeRawBufferPointer, body: UnsafeRawBufferPointer, wait: Bool) -> Sent {
        let holds = wait && holdingThread.load(ordering: .relaxed) == cls_thread_id()
        return sendLock.withLock {
            if closed.load(ordering: .relaxed) { return .notSent }
            let lock = sendLock.pointer
            if holds, lock.pointee.held_len + head.count + body.count < BlockingConnection.heldBytesLimit {
                if lock.pointee.held_len == 0 { heldSince = ProcessControl.monotonicNanoseconds() }
                if cls_send_lock_hold(lock, head.baseAddress, head.count, body.baseAddress, body.count) == 0 { return .sent }
            }
            // A frame that must not wait goes after the held ones have gone (they always wait).
            if lock.pointee.held_len > 0, !wait, !writeHeld() { return .broken }
            let outcome = SocketWriter.write(fd, UnsafeRawBufferPointer(start: lock.pointee.held, count: lock.pointee.held_len), head, body,
                                             wait: .polling(milliseconds: Self.sendWaitMs, beforeFirstByte: wait))
            lock.pointee.held_len = 0
            switch outcome {
            case .written: return .sent
            case .failed(_, let written):
                if written == 0 { return .notSent }
                _ = Glibc.shutdown(fd, Int32(SHUT_RDWR))
                return .broken
            case .full:
                _ = Glibc.shutdown(fd, Int32(SHUT_RDWR))
                return .broken
            }
        }
    }

    /// Writes one frame with `descriptors` passed along (SCM_RIGHTS, on its length prefix): the
    /// reader takes them with the frame that announces them (docs/protocol.md "Bytes"). Waits for
    /// room as a reply does; the descriptors stay the caller's.
    func send(frame: [UInt8], descriptors: [Int32]) -> Sent {
        guard !descriptors.isEmpty else { return send(frame: frame, wait: true) }
        return sendLock.withLock {
            if closed.load(ordering: .relaxed) { return .notSent }
            if !writeHeld() { return .broken }
            return frame.withUnsafeBytes { raw -> Sent in
                func prefix() -> Int {
                    descriptors.withUnsafeBufferPointer { cls_send_fds_now(fd, $0.baseAddress, Int32($0.count), raw.baseAddress, Frame.headerSize) }
                }
                var n = prefix()
                if n == -Int(EAGAIN) {
                    var p = pollfd(fd: fd, events: Int16(POLLOUT), revents: 0)
                    if poll(&p, 1, Self.sendWaitMs) > 0 { n = prefix() }
                }
                guard n == Frame.headerSize else {
                    if n <= 0 { return .notSent }
                    _ = Glibc.shutdown(fd, Int32(SHUT_RDWR))
                    return .broken
                }
                let rest = UnsafeRawBufferPointer(rebasing: raw[Frame.headerSize...])
                switch SocketWriter.write(fd, rest, UnsafeRawBufferPointer(start: nil, count: 0), wait: .polling(milliseconds: Self.sendWaitMs, beforeFirstByte: true)) {
                case .written: return .sent
                default:
                    _ = Glibc.shutdown(fd, Int32(SHUT_RDWR))
                    return .broken
                }
            }
        }
    }

    func send(frame: [UInt8], wait: Bool) -> Sent {
        frame.withUnsafeBytes { raw in
            send(header: UInt32(raw.count - Frame.headerSize), body: UnsafeRawBufferPointer(rebasing: raw[Frame.headerSize...]), wait: wait)
        }
    }

    /// Ends the link for its peer too (it then reads an end of stream); the descriptor stays
    /// until `close`.
    func shutdown() {
        _ = Glibc.shutdown(fd, Int32(SHUT_RDWR))
    }

    /// Ends the link and gives up its descriptor. Shut down first: the supervisor holds a duplicate
    /// of a callee's end (the witness it reads the link's mark by, SPEC §15), so a close alone
    /// would leave the caller writing into a socket nobody reads, its calls waiting out their time.
    func close() {
        sendLock.withLock {
            closed.store(true, ordering: .relaxed)
            sendLock.pointer.pointee.held_len = 0
            _ = Glibc.shutdown(fd, Int32(SHUT_RDWR))
            _ = Glibc.close(fd)
        }
    }
}

/// The links thread's side of one link: what it has read and not yet decoded, and the `cancel`s
/// that found the link full. Not `Sendable`: only the links thread has it (`LinksThread.readers`).
final class LinkReader {
    let socket: LinkSocket
    /// Frames over the worker's frame limit end the link (as they end a worker at the supervisor).
    var decoder: FrameDecoder
    private var scratch = [UInt8](repeating: 0, count: 16 * 1024)
    /// Caller role: `cancel`s that found the link full, sent when it has room.
    var cancelsQueued: [UInt64] = []
    /// Descriptors that came with the frames read so far (docs/protocol.md "Bytes"), in order, not
    /// yet taken by the frame that announces them; closed with the reader.
    private var descriptors: [Int32] = []
    private var received = [Int32](repeating: -1, count: Int(CLS_MAX_PASSED_FDS))

    init(_ socket: LinkSocket, maxBody: Int) {
        self.socket = socket
        decoder = FrameDecoder(maxBody: maxBody)
    }

    deinit {
        for fd in descriptors { Glibc.close(fd) }
    }

    /// After the whole frames read so far have taken theirs: descriptors no frame announced (a
    /// peer sending them with frames that carry no bytes) are closed, and the link is not to be
    /// trusted (false). Only a frame not yet whole may still have some waiting, one message's
    /// worth at most. Without this a peer could fill this worker's descriptor table, and every
    /// call with bytes it serves for others would fail.
    func settleDescriptors(partialFrame: Bool) -> Bool {
        guard !descriptors.isEmpty else { return true }
        if partialFrame && descriptors.count <= Int(CLS_MAX_PASSED_FDS) { return true }
        for fd in descriptors { Glibc.close(fd) }
        descriptors = []
        return false
    }

    /// The next `count` descriptors that came, now the caller's; nil (none taken) when fewer came.
    func take(_ count: Int) -> [Int32]? {
        guard count <= descriptors.count else { return nil }
        defer { descriptors.removeFirst(count) }
        return Array(descriptors.prefix(count))
    }

    enum Read {
        /// Bytes went into `decoder`.
        case some
        /// Nothing to read now.
        case none
        /// End of stream, or an error: the link is gone.
        case end
    }

    /// One read into `decoder` (the links thread).
    func read() -> Read {
        while true {
            // recvmsg, not read: a frame's descriptors ride on its first bytes (a read would close them).
            var count: Int32 = 0
            let fd = socket.fd
            let n = scratch.withUnsafeMutableBytes { s in
                received.withUnsafeMutableBufferPointer { cls_receive_fds(fd, s.baseAddress, s.count, $0.baseAddress, CLS_MAX_PASSED_FDS, &count) }
            }
            if count > 0 { descriptors.append(contentsOf: received.prefix(Int(count))) }
            if n == -Int(EINTR) { continue }
            if n == -Int(EAGAIN) { return .none }
            // An end, an error, or descriptors dropped (-EBADMSG): the link is gone.
            if n <= 0 { return .end }
            scratch.withUnsafeBytes { decoder.append(UnsafeRawBufferPointer(rebasing: $0[0..<n])) }
            return .some
        }
    }
}
