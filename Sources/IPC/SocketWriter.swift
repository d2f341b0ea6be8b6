#if canImport(Glibc)
import Glibc
#endif
import LinuxSupport

/// Writes a frame's parts to a stream socket with `sendmsg` until every byte is written, across
/// short writes: the one send loop of the worker's protocol socket (`BlockingConnection`) and of
/// its peer links (PluginWorker's `LinkSocket`). The caller holds the socket's send lock.
public enum SocketWriter {
    /// What a full socket does to a write.
    public enum Wait: Sendable {
        /// The socket blocks: `sendmsg` itself waits for room.
        case blocking
        /// Each `sendmsg` returns at once (`MSG_DONTWAIT`); when the socket is full, `poll` waits for
        /// room, up to `milliseconds` each time. With `beforeFirstByte` false, a socket full before
        /// any byte went fails at once (`EAGAIN`, nothing written): the caller may send the frame
        /// another way; once part of it went, the rest always waits.
        case polling(milliseconds: Int32, beforeFirstByte: Bool)
    }

    public enum Outcome: Equatable, Sendable {
        case written
        /// `sendmsg` failed with `errno` after `written` bytes of the frame (0: none went).
        case failed(errno: Int32, written: Int)
        /// No room came within the wait, after `written` bytes.
        case full(written: Int)
    }

    /// Writes `a`, `b` and `c` (any of them empty) in this order to `fd`, with `MSG_NOSIGNAL` (a
    /// closed peer is an `EPIPE`, not a signal); `EINTR` is retried.
    @inline(__always)
    public static func write(_ fd: Int32, _ a: UnsafeRawBufferPointer, _ b: UnsafeRawBufferPointer,
                             _ c: UnsafeRawBufferPointer = UnsafeRawBufferPointer(start: nil, count: 0), wait: Wait) -> Outcome {
        var iov = (iovec(), iovec(), iovec())
        return withUnsafeMutableBytes(of: &iov) { raw in
            let vectors = raw.bindMemory(to: iovec.self)
            var count = 0
            func add(_ part: UnsafeRawBufferPointer) {
                guard part.count > 0 else { return }
                vectors[count] = iovec(iov_base: UnsafeMutableRawPointer(mutating: part.baseAddress), iov_len: part.count)
                count += 1
            }
            add(a)
            add(b)
            add(c)
            return write(fd, UnsafeMutableBufferPointer(rebasing: vectors[0..<count]), total: a.count + b.count + c.count, wait: wait)
        }
    }

    /// The loop: `iov` (`total` bytes) is advanced past what each `sendmsg` wrote.
    @inline(__always)
    static func write(_ fd: Int32, _ iov: UnsafeMutableBufferPointer<iovec>, total: Int, wait: Wait) -> Outcome {
        var flags = Int32(MSG_NOSIGNAL)
        var waitMs: Int32 = 0
        var waitsFirst = true
        if case .polling(let ms, let beforeFirstByte) = wait {
            flags |= Int32(MSG_DONTWAIT)
            waitMs = ms
            waitsFirst = beforeFirstByte
        }
        var written = 0
        var first = 0
        while written < total {
            var msg = msghdr()
            msg.msg_iov = iov.baseAddress! + first
            msg.msg_iovlen = iov.count - first
            let n = sendmsg(fd, &msg, flags)
            if n < 0 {
                let e = errno
                if e == EINTR { continue }
                guard e == EAGAIN, waitMs > 0, written > 0 || waitsFirst else { return .failed(errno: e, written: written) }
                var p = pollfd(fd: fd, events: Int16(POLLOUT), revents: 0)
                if poll(&p, 1, waitMs) <= 0 || p.revents & Int16(POLLOUT) == 0 { return .full(written: written) }
                continue
            }
            written += n
            advance(iov, first: &first, by: n)
        }
        return .written
    }
}
