#if canImport(Glibc)
import Glibc
#endif
import CLinuxSupport
import LinuxSupport
import PluginProtocol
import Synchronization

/// A framed connection over a connected stream socket, with blocking reads and thread-safe writes.
/// Used by the worker (one reader thread, writers on any thread) and by CLI clients.
/// Owns its descriptor: `close()` closes it.
public final class BlockingConnection: Sendable {
    public let fd: Int32
    /// Writers take it for a whole frame; the worker's SIGSYS reporter takes it too (from a signal
    /// handler), so a violation report never lands inside another frame.
    public let sendLock = SendLock()
    /// Reader state: used by one reading thread at a time (documented on `receive`).
    private nonisolated(unsafe) var decoder: FrameDecoder
    /// How much room a read gets (straight into the decoder's buffer: no copy through a scratch array).
    private static let readSize = 256 * 1024
    /// How long `receive` polls before it sleeps (reader state too): see `pollBeforeSleeping`.
    private nonisolated(unsafe) var spin = SpinWindow(maxNanoseconds: 0)
    private let closed = Atomic<Bool>(false)
    /// The reading thread, when it holds its own writes back while it delivers the frames of one
    /// read (`holdWritesWhileDelivering`); 0: nobody's writes are held.
    private let holdingThread = Atomic<UInt>(0)
    /// When the first of the frames held now was held (`monotonicNanoseconds`). Guarded by
    /// `sendLock`, which keeps the held frames themselves (`cls_send_lock.held`), where the
    /// worker's fatal-signal reporter and its exit handler find them.
    private nonisolated(unsafe) var heldSince: Int64 = 0

    /// At most this many bytes are held: a frame that would make more goes out at once, with the
    /// held ones before it.
    public static let heldBytesLimit = 64 * 1024
    /// … or, at the latest, before the next frame is delivered once the first has waited this long
    /// (a slow handler still delays the replies before it in the same read by its own run).
    public static let heldNanosecondsLimit: Int64 = 200_000
    /// This connection's limit (reader state, set by `holdWritesWhileDelivering`).
    private nonisolated(unsafe) var heldLimit = BlockingConnection.heldNanosecondsLimit

    /// Takes ownership of `fd`, a connected stream socket.
    public init(fd: Int32, maxBody: Int = Frame.defaultMaxBody) {
        self.fd = fd
        self.decoder = FrameDecoder(maxBody: maxBody)
    }

    /// Lets `receive` poll the socket for up to `microseconds` before it sleeps, the window adapted
    /// to how far apart messages come (`SpinWindow`); 0 (the default): it sleeps at once. Set by
    /// the reading thread, before or between its `receive`s.
    public func pollBeforeSleeping(microseconds: Int) {
        spin = SpinWindow(maxNanoseconds: microseconds * 1000)
    }

    /// From now on, what the calling thread (the one that calls `receive`) writes while it
    /// delivers frames is held and sent in one write once the frames of that read are delivered,
    /// before it reads (or polls) again, so a burst of calls answered on the reading thread costs
    /// one system call and one wake-up of the peer instead of one per reply. Other threads' writes
    /// are not held; one that comes while frames are held sends them first, in the same write, so
    /// the order of frames on the socket is the order they were written. Held frames go out
    /// earlier when 64 KiB would wait, or before the next delivery once the first has waited `limit`
    /// (200 µs by default).
    ///
    /// The held frames live with `sendLock`, where the worker's fatal-signal reporter finds them
    /// and sends them before its report (sandbox_support.c); see also `sendsHeldAtExit`.
    public func holdWritesWhileDelivering(atMostNanoseconds limit: Int64 = BlockingConnection.heldNanosecondsLimit) {
        heldLimit = limit
        holdingThread.store(UInt(bitPattern: Int(bitPattern: pthread_self())), ordering: .relaxed)
    }

    /// At the process's exit (`exit()` from a plugin's handler, say), what is held is sent first.
    /// For a connection that lives as long as the process (the worker's); one per process.
    public func sendsHeldAtExit() {
        cls_send_lock_flush_at_exit(sendLock.pointer, fd)
    }

    /// Sends what is held and holds nothing from now on (the reading thread, once it reads no more).
    public func stopHolding() {
        holdingThread.store(0, ordering: .relaxed)
        try? flushHeld(force: true)
    }

    /// Whether the caller's writes are held (it is the reading thread, and holding is on).
    private var callerHolds: Bool {
        let holder = holdingThread.load(ordering: .relaxed)
        return holder != 0 && holder == UInt(bitPattern: Int(bitPattern: pthread_self()))
    }

    /// Connects to the Unix socket at `path`.
    public static func connect(path: String) throws(SystemError) -> BlockingConnection {
        let fd = try syscallRetrying("socket") { socket(AF_UNIX, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0) }
        var addr = sockaddr_un()
        addr.sun_family = sa_family_t(AF_UNIX)
        let capacity = MemoryLayout.size(ofValue: addr.sun_path)
        guard path.utf8.count < capacity else {
            Glibc.close(fd)
            throw SystemError(call: "connect", errno: ENAMETOOLONG, context: path)
        }
        withUnsafeMutableBytes(of: &addr.sun_path) { raw in
            raw.copyBytes(from: path.utf8)
            raw[path.utf8.count] = 0
        }
        let size = socklen_t(MemoryLayout<sockaddr_un>.size)
        let rc = withUnsafePointer(to: &addr) { p in
            p.withMemoryRebound(to: sockaddr.self, capacity: 1) { Glibc.connect(fd, $0, size) }
        }
        if rc != 0 {
            let e = errno
            Glibc.close(fd)
            throw SystemError(call: "connect", errno: e, context: path)
        }
        return BlockingConnection(fd: fd)
    }

    /// Writes one whole frame (length prefix included). Thread-safe; frames never interleave.
    public func sendFrame(_ frame: UnsafeRawBufferPointer) throws(SystemError) {
        try send(frame, UnsafeRawBufferPointer(start: nil, count: 0))
    }

    public func sendFrame(_ frame: [UInt8]) throws(SystemError) {
        let result: Result<Void, SystemError> = frame.withUnsafeBytes { raw in
            do throws(SystemError) { try sendFrame(raw); return .success(()) } catch { return .failure(error) }
        }
        try result.get()
    }

    /// Frames `body` and sends it.
    public func sendBody(_ body: UnsafeRawBufferPointer) throws(SystemError) {
        var header: UInt32 = UInt32(body.count).bigEndian
        try withUnsafeBytes(of: &header) { (prefix) throws(SystemError) in try send(prefix, body) }
    }

    /// Sends the frame made of `head` and `tail` (or holds it, for the reading thread while it
    /// delivers), after any frames held before it.
    private func send(_ head: UnsafeRawBufferPointer, _ tail: UnsafeRawBufferPointer) throws(SystemError) {
        let holds = callerHolds
        let lock = sendLock.pointer
        try sendLock.withLock { () throws(SystemError) in
            // Held unless that makes 64 KiB or more: then all of it goes now, the frame unheld.
            if holds, lock.pointee.held_len + head.count + tail.count < Self.heldBytesLimit {
                if lock.pointee.held_len == 0 { heldSince = ProcessControl.monotonicNanoseconds() }
                let rc = cls_send_lock_hold(lock, head.baseAddress, head.count, tail.baseAddress, tail.count)
                if rc == 0 { return }
            }
            try writeHeld(head, tail)
        }
    }

    /// Writes the held frames, then `head` and `tail`, with one `sendmsg` where the socket takes
    /// them all (under `sendLock`). The held frames are gone afterwards, written or not: after a
    /// failed write the stream is broken anyway.
    private func writeHeld(_ head: UnsafeRawBufferPointer = UnsafeRawBufferPointer(start: nil, count: 0),
                           _ tail: UnsafeRawBufferPointer = UnsafeRawBufferPointer(start: nil, count: 0)) throws(SystemError) {
        let lock = sendLock.pointer
        defer { lock.pointee.held_len = 0 }
        try write(UnsafeRawBufferPointer(start: lock.pointee.held, count: lock.pointee.held_len), head, tail)
    }

    /// Writes `a`, `b` and `c` (any of them empty), until all are written (`SocketWriter`; the
    /// socket blocks).
    private func write(_ a: UnsafeRawBufferPointer, _ b: UnsafeRawBufferPointer, _ c: UnsafeRawBufferPointer) throws(SystemError) {
        switch SocketWriter.write(fd, a, b, c, wait: .blocking) {
        case .written: return
        case .failed(let e, _): throw SystemError(call: "sendmsg", errno: e, context: "socket \(fd)")
        case .full: throw SystemError(call: "sendmsg", errno: EAGAIN, context: "socket \(fd)")  // only when polling
        }
    }

    /// Sends what the reading thread holds: before it reads, or when the first held frame has
    /// waited too long (`force` false).
    private func flushHeld(force: Bool) throws(SystemError) {
        try sendLock.withLock { () throws(SystemError) in
            guard sendLock.pointer.pointee.held_len > 0 else { return }
            if !force, ProcessControl.monotonicNanoseconds() - heldSince < heldLimit { return }
            try writeHeld()
        }
    }

    /// Blocks until one frame arrives and calls `body` with its bytes; returns nil at end of stream.
    /// Throws on a read error or an invalid frame header. Call from one thread at a time.
    public func receive<R>(_ body: (UnsafeRawBufferPointer) throws -> R) throws -> R? {
        let holds = holdingThread.load(ordering: .relaxed) != 0
        while true {
            // A held write that fails means the peer is gone: the read below says so.
            if holds, decoder.bufferedCount > 0 { try? flushHeld(force: false) }
            if let r = try decoder.next(body) { return r }
            if holds { try? flushHeld(force: true) }
            let n = try readPolling()
            if n == 0 {
                if decoder.bufferedCount > 0 { throw SystemError(call: "read", errno: EPIPE, context: "truncated frame on socket \(fd)") }
                return nil
            }
        }
    }

    /// Reads what comes next: first by polling for the spin window's length (non-blocking reads),
    /// then by a blocking read, whose wait adapts the window (`SpinWindow`). Without a window it
    /// only reads.
    private func readPolling() throws -> Int {
        let polls = spin.maxNanoseconds > 0
        let started = polls ? ProcessControl.monotonicNanoseconds() : 0
        if spin.currentNanoseconds > 0, PollingTurn.take() {
            defer { PollingTurn.give() }
            let deadline = started + Int64(spin.currentNanoseconds)
            repeat {
                // Caught while polling: the window stays as it is.
                if let n = try readAvailableNow() { return n }
            } while ProcessControl.monotonicNanoseconds() < deadline
        }
        let n = try readAvailable()
        if polls { spin.slept(waited: Int(ProcessControl.monotonicNanoseconds() - started)) }
        return n
    }

    /// Bytes read from the socket and not yet handed out as frames (reader state: read it on the
    /// reading thread): a reader that polls the socket first must not wait for data already here.
    public var bufferedByteCount: Int { decoder.bufferedCount }

    /// For a reader that polls the socket itself: calls `body` with the next frame already read,
    /// without reading; nil when no whole frame is here. Throws on an invalid frame header.
    public func nextReadFrame<R>(_ body: (UnsafeRawBufferPointer) throws -> R) throws -> R? {
        try decoder.next(body)
    }

    /// One read of what the socket holds (it blocks when nothing is there: a reader that polls the
    /// socket itself calls it after `poll` said it is readable); 0 at the end of the stream.
    /// Throws on a read error.
    public func readAvailable() throws -> Int {
        let fd = fd
        return try decoder.fill(atLeast: Self.readSize) { raw in
            try syscallRetrying("read", context: "socket \(fd)") { read(fd, raw.baseAddress, raw.count) }
        }
    }

    /// One read that does not wait (for a reader that polls its socket): nil when nothing is there
    /// now, 0 at the end of the stream. Throws on a read error.
    public func readAvailableNow() throws(SystemError) -> Int? {
        let fd = fd
        let n = decoder.fill(atLeast: Self.readSize) { raw in recv(fd, raw.baseAddress, raw.count, Int32(MSG_DONTWAIT)) }
        if n >= 0 { return n }
        let e = errno
        guard e == EAGAIN || e == EWOULDBLOCK || e == EINTR else { throw SystemError(call: "recv", errno: e, context: "socket \(fd)") }
        return nil
    }

    /// Receives one frame as an array.
    public func receiveFrame() throws -> [UInt8]? {
        try receive { Array($0) }
    }

    /// Shuts the socket down for both directions without closing the descriptor (wakes a blocked reader).
    public func shutdown() {
        _ = Glibc.shutdown(fd, Int32(SHUT_RDWR))
    }

    public func close() {
        if !closed.exchange(true, ordering: .acquiringAndReleasing) { _ = Glibc.close(fd) }
    }

    deinit { close() }
}
