#if canImport(Glibc)
import Glibc
#endif
import CLinuxSupport
import LinuxSupport

/// How the hand-off socket serves its clients: one thread accepts them and waits, in one `poll`,
/// for each to send something; only a client whose request has begun to arrive takes one of the
/// `concurrentClients` threads that read and answer it (all of it within `requestMilliseconds` of
/// its connection). So
/// clients that connect and send nothing cost a slot in the poll, not a thread, and keep no other
/// waiting: they are refused after `requestMilliseconds` (`no request came within ...`).
extension LinkHandoff {
    /// Threads serving clients at once.
    static let concurrentClients = 16
    /// Clients connected that have sent nothing yet, at most: past it the one waiting longest is
    /// refused to make room (a descriptor each).
    static let silentClients = 1024

    /// The accept thread (started by `start` and `adopt`); it ends once `stop` shut the listener.
    func serve() {
        // Accepted, nothing read yet: each with the moment it is given up.
        var silent: [(fd: Int32, until: Int64)] = []
        defer { for client in silent { close(client.fd) } }
        while !stopped.withLock({ $0 }) {
            let now = ProcessControl.monotonicNanoseconds()
            let firstEnd = silent.map(\.until).min()
            let wait = firstEnd.map { Int32(max(0, min(1000, ($0 - now) / 1_000_000 + 1))) } ?? 1000
            var polled = [pollfd(fd: listener, events: Int16(POLLIN), revents: 0)]
                + silent.map { pollfd(fd: $0.fd, events: Int16(POLLIN), revents: 0) }
            let count = poll(&polled, nfds_t(polled.count), wait)
            if count < 0 {
                guard errno == EINTR else { break }
                continue
            }
            // Those that sent something (or hung up: told so in its turn) go to a thread.
            var still: [(fd: Int32, until: Int64)] = []
            let after = ProcessControl.monotonicNanoseconds()
            for (client, p) in zip(silent, polled.dropFirst()) {
                if p.revents != 0 {
                    dispatch(client)
                } else if client.until <= after {
                    refuse(client.fd, "no request came within \(Self.requestMilliseconds) ms")
                    close(client.fd)
                } else {
                    still.append(client)
                }
            }
            silent = still
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
            if silent.count >= Self.silentClients {
                let oldest = silent.removeFirst()
                refuse(oldest.fd, "no request came, and \(Self.silentClients) other clients wait to send theirs")
                close(oldest.fd)
            }
            silent.append((client, after + Self.requestMilliseconds * 1_000_000))
        }
        close(listener)
    }

    /// `client`'s request has begun to arrive: a thread reads and answers it, one of the
    /// `concurrentClients`, or the next of them to be free. Where no thread can be started at all,
    /// this one serves it.
    private func dispatch(_ client: (fd: Int32, until: Int64)) {
        let startThread = ready.withLock { state -> Bool in
            state.clients.append(client)
            guard state.threads < Self.concurrentClients else { return false }
            state.threads += 1
            return true
        }
        guard startThread else { return }
        // Counted as a thread either way: `serveReady` counts itself out when it is done.
        if !Threads.tryStart(name: "link-handoff-1", { [self] in serveReady() }) { serveReady() }
    }

    /// Serves clients whose request has begun to arrive until none is left.
    private func serveReady() {
        while let client = ready.withLock({ state -> (fd: Int32, until: Int64)? in
            guard !state.clients.isEmpty else {
                state.threads -= 1
                return nil
            }
            return state.clients.removeFirst()
        }) {
            // Within the time its request had from its connection, waiting for a thread included.
            handOver(to: client.fd, until: client.until)
            close(client.fd)
        }
    }
}
