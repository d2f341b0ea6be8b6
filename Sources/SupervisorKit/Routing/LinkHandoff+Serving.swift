#if canImport(Glibc)
import Glibc
#endif
import CLinuxSupport
import LinuxSupport
import PluginProtocol

/// How the hand-off socket serves its clients: one thread accepts them and reads each one's
/// request as its bytes come, all in one `poll`, and answers a request as soon as it is whole
/// (checking a memfd and sending a descriptor take microseconds). A request must come whole within
/// `requestMilliseconds` of its connection; a client that sends nothing, or a byte at a time, is
/// refused then, told how much came. So no client, silent or slow, keeps another waiting.
extension LinkHandoff {
    /// Clients connected whose request is not whole yet, at most: past it the one waiting longest
    /// is refused to make room (a descriptor each).
    static let clientsAtOnce = 1024

    /// A client whose request is under way.
    private struct Incoming {
        let fd: Int32
        /// When its request must have come whole (monotonic nanoseconds).
        let until: Int64
        var bytes: [UInt8] = []
        /// The descriptors that came with its first bytes.
        var received: [Int32] = []

        func close() {
            Glibc.close(fd)
            for descriptor in received { Glibc.close(descriptor) }
        }
    }

    /// What one read of a client came to.
    private enum Progress {
        /// Not whole yet.
        case partial
        /// Whole: the frame's body.
        case whole(ArraySlice<UInt8>)
        /// Refused, with why.
        case refused(String)
        /// It closed its end (nothing to answer).
        case gone
    }

    /// The accept thread (started by `start` and `adopt`); it ends once `stop` shut the listener.
    func serve() {
        var incoming: [Incoming] = []
        defer { for client in incoming { client.close() } }
        while !stopped.withLock({ $0 }) {
            let now = ProcessControl.monotonicNanoseconds()
            let wait = incoming.map(\.until).min().map { Int32(max(0, min(1000, ($0 - now) / 1_000_000 + 1))) } ?? 1000
            var polled = [pollfd(fd: listener, events: Int16(POLLIN), revents: 0)]
                + incoming.map { pollfd(fd: $0.fd, events: Int16(POLLIN), revents: 0) }
            if poll(&polled, nfds_t(polled.count), wait) < 0 {
                guard errno == EINTR else { break }
                continue
            }
            let after = ProcessControl.monotonicNanoseconds()
            var still: [Incoming] = []
            for (var client, p) in zip(incoming, polled.dropFirst()) {
                var progress: Progress = p.revents != 0 ? read(&client) : .partial
                if case .partial = progress, client.until <= after { progress = .refused(Self.late(client.bytes)) }
                switch progress {
                case .partial:
                    still.append(client)
                case .whole(let body):
                    answer(client.fd, body: body, received: &client.received)
                    client.close()
                case .refused(let why):
                    refuse(client.fd, why)
                    client.close()
                case .gone:
                    client.close()
                }
            }
            incoming = still
            let listening = polled[0].revents
            if listening & Int16(POLLNVAL | POLLERR | POLLHUP) != 0 { break }
            guard listening & Int16(POLLIN) != 0 else { continue }
            let client = cls_accept_cloexec(listener)
            if client < 0 {
                // Out of descriptors (or memory) for now: the client waits in the backlog, and the
                // socket serves again once some are back. Anything else: the listener was closed.
                guard [EMFILE, ENFILE, ENOBUFS, ENOMEM, ECONNABORTED, EAGAIN].contains(-client) else { break }
                if -client != ECONNABORTED && -client != EAGAIN { usleep(100_000) }
                continue
            }
            var uid: UInt32 = 0
            guard cls_peer_uid(client, &uid) == 0, uid == geteuid() || uid == 0 else {
                refuse(client, "only the supervisor's own user may take a link")
                close(client)
                continue
            }
            if incoming.count >= Self.clientsAtOnce {
                let oldest = incoming.removeFirst()
                refuse(oldest.fd, "no whole request came, and \(Self.clientsAtOnce) other clients are sending theirs")
                oldest.close()
            }
            incoming.append(Incoming(fd: client, until: after + Self.requestMilliseconds * 1_000_000))
        }
        close(listener)
    }

    /// Reads what `client` has sent: its first bytes with their descriptors (a `put` brings its
    /// memfd on them), the rest as it comes, until its frame (4,092 bytes at most) is whole.
    private func read(_ client: inout Incoming) -> Progress {
        var chunk = [UInt8](repeating: 0, count: 4096 - client.bytes.count)
        let n: Int
        if client.bytes.isEmpty && client.received.isEmpty {
            var fds = [Int32](repeating: -1, count: Int(CLS_MAX_PASSED_FDS))
            var count: Int32 = 0
            n = chunk.withUnsafeMutableBytes { c in
                fds.withUnsafeMutableBufferPointer { cls_receive_fds_within(client.fd, c.baseAddress, c.count, $0.baseAddress, CLS_MAX_PASSED_FDS, &count, 0) }
            }
            client.received = Array(fds.prefix(Int(max(0, count))))
            if n == -Int(EBADMSG) { return .refused("more descriptors came than a request brings (a put brings exactly one)") }
        } else {
            // No more descriptors come with the rest (the kernel closes any that do).
            let got = chunk.withUnsafeMutableBytes { recv(client.fd, $0.baseAddress, $0.count, Int32(MSG_DONTWAIT)) }
            n = got < 0 ? -Int(errno) : got
        }
        if n < 0 {
            let error = Int32(-n)
            if error == EAGAIN || error == EINTR || error == ETIMEDOUT { return .partial }
            return .refused("the request could not be read: \(String(cString: strerror(error)))")
        }
        if n == 0 { return .gone }
        client.bytes += chunk.prefix(n)
        guard client.bytes.count >= 4 else { return .partial }
        let b = client.bytes
        guard let length = try? Frame.bodyLength(b0: b[0], b1: b[1], b2: b[2], b3: b[3], limit: 4092) else {
            return .refused("a request is 4,092 bytes at most, and this one's length says more")
        }
        guard b.count >= 4 + length else { return .partial }
        return .whole(b[4..<(4 + length)])
    }

    /// Why a request that did not come whole in time is refused, by how much of it came.
    private static func late(_ bytes: [UInt8]) -> String {
        switch bytes.count {
        case 0: return "no request came within \(requestMilliseconds) ms"
        case ..<4: return "the request's 4-byte length did not come within \(requestMilliseconds) ms (\(bytes.count) came)"
        default:
            let length = (try? Frame.bodyLength(b0: bytes[0], b1: bytes[1], b2: bytes[2], b3: bytes[3], limit: 4092)) ?? 0
            return "the request's \(length) bytes did not come within \(requestMilliseconds) ms (\(bytes.count - 4) came)"
        }
    }
}
