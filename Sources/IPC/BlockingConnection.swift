#if canImport(Glibc)
import Glibc
#endif
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
    private nonisolated(unsafe) var scratch = [UInt8](repeating: 0, count: 256 * 1024)
    /// How long `receive` polls before it sleeps (reader state too): see `pollBeforeSleeping`.
    private nonisolated(unsafe) var spin = SpinWindow(maxNanoseconds: 0)
    private let closed = Atomic<Bool>(false)

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
        try sendLock.withLock { () throws(SystemError) in
            var offset = 0
            while offset < frame.count {
                let n = try syscallRetrying("write", context: "socket \(fd)") {
                    Glibc.send(fd, frame.baseAddress! + offset, frame.count - offset, Int32(MSG_NOSIGNAL))
                }
                offset += n
            }
        }
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
        try sendLock.withLock { () throws(SystemError) in
            var iov = [
                iovec(iov_base: withUnsafeMutableBytes(of: &header) { $0.baseAddress }, iov_len: 4),
                iovec(iov_base: UnsafeMutableRawPointer(mutating: body.baseAddress), iov_len: body.count),
            ]
            var remaining = body.count + 4
            var first = 0
            while remaining > 0 {
                let n = try iov.withUnsafeMutableBufferPointer { iovs throws(SystemError) in
                    var msg = msghdr()
                    msg.msg_iov = iovs.baseAddress! + first
                    msg.msg_iovlen = iovs.count - first
                    return try syscallRetrying("sendmsg", context: "socket \(fd)") { sendmsg(fd, &msg, Int32(MSG_NOSIGNAL)) }
                }
                remaining -= n
                iov.withUnsafeMutableBufferPointer { advance($0, first: &first, by: n) }
            }
            withExtendedLifetime(header) {}
        }
    }

    /// Blocks until one frame arrives and calls `body` with its bytes; returns nil at end of stream.
    /// Throws on a read error or an invalid frame header. Call from one thread at a time.
    public func receive<R>(_ body: (UnsafeRawBufferPointer) throws -> R) throws -> R? {
        while true {
            if let r = try decoder.next(body) { return r }
            let n = try readPolling()
            if n == 0 {
                if decoder.bufferedCount > 0 { throw SystemError(call: "read", errno: EPIPE, context: "truncated frame on socket \(fd)") }
                return nil
            }
            scratch.withUnsafeBytes { raw in decoder.append(UnsafeRawBufferPointer(rebasing: raw[0..<n])) }
        }
    }

    /// Reads what comes next: first by polling for the spin window's length (non-blocking reads),
    /// then by a blocking read, whose wait adapts the window (`SpinWindow`). Without a window it
    /// only reads.
    private func readPolling() throws -> Int {
        let polls = spin.maxNanoseconds > 0
        let started = polls ? ProcessControl.monotonicNanoseconds() : 0
        if spin.currentNanoseconds > 0 {
            let deadline = started + Int64(spin.currentNanoseconds)
            repeat {
                // Caught while polling: the window stays as it is.
                let n = scratch.withUnsafeMutableBytes { raw in recv(fd, raw.baseAddress, raw.count, Int32(MSG_DONTWAIT)) }
                if n >= 0 { return n }
                let e = errno
                guard e == EAGAIN || e == EWOULDBLOCK || e == EINTR else { throw SystemError(call: "recv", errno: e, context: "socket \(fd)") }
            } while ProcessControl.monotonicNanoseconds() < deadline
        }
        let n = try scratch.withUnsafeMutableBytes { raw in
            try syscallRetrying("read", context: "socket \(fd)") { read(fd, raw.baseAddress, raw.count) }
        }
        if polls { spin.slept(waited: Int(ProcessControl.monotonicNanoseconds() - started)) }
        return n
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
