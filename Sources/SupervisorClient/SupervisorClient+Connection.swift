import CLinuxSupport
import IPC
import LinuxSupport
import PluginProtocol
import Protocol
import Synchronization
#if canImport(Glibc)
import Glibc
#endif

/// The control connection of a `SupervisorClient`: requests and their answers, the reader thread,
/// reconnecting, and the calls of the methods it provides.
extension SupervisorClient {
    // MARK: Requests

    func takeID() -> UInt64 {
        state.withLock { s in
            defer { s.nextID += 1 }
            return s.nextID
        }
    }

    /// One request, answered once; the task's cancellation gives it up (and cancels its call at
    /// the plugin).
    /// `tail`: inline bytes the request's attachments announce.
    func request(_ kind: MessageKind, id: UInt64? = nil, timeout: Duration? = nil, tail: [UInt8]? = nil,
                         _ fill: (inout FrameBuilder) -> Void) async throws -> [UInt8] {
        let link = try await currentLink(waiting: timeout ?? reconnectWait)
        let id = id ?? takeID()
        var builder = FrameBuilder(kind: kind)
        builder.uint("id", id)
        fill(&builder)
        let frame = tail.map { t in t.withUnsafeBytes { builder.finish(tail: $0) } } ?? builder.finish()
        return try await withTaskCancellationHandler {
            try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<[UInt8], any Error>) in
                let live = state.withLock { s -> Bool in
                    guard s.link === link else { return false }
                    s.waiting[id] = Waiter(link: link.number, continuation: continuation)
                    if kind == .events { s.streams[id]?.link = link.number }
                    return true
                }
                guard live else {
                    return continuation.resume(throwing: ErrorBody(.unavailable, Self.connectionLost))
                }
                if Task.isCancelled { return giveUp(id, link) }
                do {
                    try link.connection.sendFrame(frame)
                } catch {
                    if let waiter = state.withLock({ $0.waiting.removeValue(forKey: id) }) {
                        waiter.continuation.resume(throwing: ErrorBody(.unavailable, "\(Self.connectionLost): \(error)"))
                    }
                }
            }
        } onCancel: {
            giveUp(id, link)
        }
    }

    /// The calling task was cancelled: its request fails now, and the supervisor is told.
    func giveUp(_ id: UInt64, _ link: Link) {
        guard let waiter = state.withLock({ $0.waiting.removeValue(forKey: id) }) else { return }
        waiter.continuation.resume(throwing: CancellationError())
        send(cancelOf: id, on: link)
    }

    func send(cancelOf id: UInt64, on link: Link) {
        var cancel = FrameBuilder(kind: .cancel)
        cancel.uint("id", id)
        try? link.connection.sendFrame(cancel.finish())
    }

    func unfollow(_ id: UInt64) {
        let found = state.withLock { s -> (Follower?, Link?) in (s.streams.removeValue(forKey: id), s.link) }
        if found.0 != nil, let link = found.1 { send(cancelOf: id, on: link) }
    }

    // MARK: The connection

    /// How the client's own errors for a supervisor that gave no answer begin (what `unanswered` knows).
    static let connectionLost = "the connection to the supervisor was lost"
    static let unreachable = "cannot reach the supervisor"

    /// An error of the client's own: the supervisor did not answer (not there, or its connection
    /// ended), as opposed to an answer of the supervisor's.
    static func unanswered(_ error: ErrorBody) -> Bool {
        error.data?.started == nil && (error.message.hasPrefix(connectionLost) || error.message.hasPrefix(unreachable))
    }

    /// The connection, made (again) when there is none: a supervisor that is not there yet is
    /// waited for, up to `waiting`.
    func currentLink(waiting: Duration) async throws -> Link {
        if let link = state.withLock({ $0.link }) { return link }
        let deadline = ContinuousClock.now + waiting
        while true {
            if state.withLock({ $0.closed }) { throw ErrorBody(.unavailable, "the client is closed") }
            do {
                return adopt(try BlockingConnection.connect(path: socketPath))
            } catch {
                let notYet = error.errno == ENOENT || error.errno == ECONNREFUSED
                guard notYet, ContinuousClock.now < deadline else {
                    throw ErrorBody(.unavailable, "\(Self.unreachable) at \(socketPath) (\(error)); is `supervisor start` running with this home or socket?")
                }
                try await Task.sleep(for: .milliseconds(20))
            }
        }
    }

    /// A new connection becomes the client's (unless another task made one first) and gets its reader.
    func adopt(_ connection: BlockingConnection) -> Link {
        let (link, made, methods) = state.withLock { s -> (Link, Bool, [String]) in
            if let existing = s.link { return (existing, false, []) }
            s.connections += 1
            let link = Link(number: s.connections, connection: connection)
            s.link = link
            return (link, true, Array(s.methods.keys))
        }
        guard made else {
            connection.close()
            return link
        }
        Threads.start(name: "supervisor-client") { [weak self] in
            // Each frame is read where the connection's decoder holds it (no copy of a large one).
            while let more = try? link.connection.receive({ body -> Bool in
                guard let self else { return false }
                self.received(body, on: link)
                return true
            }), more {}
            self?.ended(link)
            link.connection.close()
        }
        // What this client provided is provided again (after a supervisor's restart).
        for name in methods.sorted() { provide(name, on: link) }
        return link
    }

    /// Sends `provide` for `name` (its answer is not waited for: a refusal can only be a bad name).
    func provide(_ name: String, on link: Link) {
        var provide = FrameBuilder(kind: .provide)
        provide.uint("id", takeID())
        provide.string("method", name)
        try? link.connection.sendFrame(provide.finish())
    }

    /// The connection ended: what waited on it fails, its event streams end, and a client that
    /// provides methods connects again in the background to keep providing them.
    func ended(_ link: Link) {
        let (waiters, followers, calls, reconnect, streamCalls) = state.withLock { s -> ([Waiter], [Follower], [Task<Void, Never>], Bool, [StreamCall]) in
            guard s.link === link else { return ([], [], [], false, []) }
            s.link = nil
            let streamCalls = s.streamCalls.values.filter { $0.link == link.number }
            s.streamCalls = s.streamCalls.filter { $0.value.link != link.number }
            let waiters = s.waiting.values.filter { $0.link == link.number }
            s.waiting = s.waiting.filter { $0.value.link != link.number }
            let followers = s.streams.values.filter { $0.link == link.number }
            s.streams = s.streams.filter { $0.value.link != link.number }
            let calls = s.hostCalls.values.compactMap { $0 }
            s.hostCalls = [:]
            let reconnect = !s.closed && !s.methods.isEmpty && !s.reproviding
            if reconnect { s.reproviding = true }
            return (waiters, followers, calls, reconnect, streamCalls)
        }
        let gone = ErrorBody(.unavailable, Self.connectionLost)
        for waiter in waiters { waiter.continuation.resume(throwing: gone) }
        for call in streamCalls {
            call.feeder?.cancel()
            call.input?.fail(gone)
            call.receiver.finish(.failure(gone))
        }
        for follower in followers { follower.continuation.finish(throwing: gone) }
        for call in calls { call.cancel() }
        guard reconnect else { return }
        Task { [weak self] in
            defer { self?.state.withLock { $0.reproviding = false } }
            while let self, !self.state.withLock({ $0.closed }) {
                if (try? await self.currentLink(waiting: .seconds(60))) != nil { return }
                try? await Task.sleep(for: .milliseconds(100))
            }
        }
    }

    /// One frame from the supervisor.
    func received(_ bytes: UnsafeRawBufferPointer, on link: Link) {
        guard let env = try? Envelope.parse(bytes), let kind = env.kind else { return }
        switch kind {
        case .reply:
            guard let id = env.id else { return }
            guard let waiter = state.withLock({ $0.waiting.removeValue(forKey: id) }) else { return streamEnded(id, env, bytes) }
            if env.attachments != nil, state.withLock({ $0.attached[id] != nil }) {
                // The bytes a `callBytes` waits for, taken now (tokens are good once, and for
                // seconds); kept only while it still waits (else closed here).
                do {
                    let collected = try AttachedBytes.collect(env, bytes, socketPath: socketPath)
                    let kept = state.withLock { s -> Bool in
                        guard s.attached[id] != nil else { return false }
                        s.attached[id] = collected
                        return true
                    }
                    if !kept { for taken in collected { taken.close() } }
                } catch {
                    return waiter.continuation.resume(throwing: error)
                }
            }
            waiter.continuation.resume(with: HostCoding.answer(of: env, in: bytes).mapError { $0 as any Error })
        case .chunk, .credit:
            streamFrame(kind, env, bytes)
        case .hostEvent:
            guard let id = env.id, let follower = state.withLock({ $0.streams[id] }),
                  let event = try? ProtocolJSON.decode(HostEvent.self, from: bytes) else { return }
            follower.continuation.yield(event)
        case .call:
            guard let id = env.id else { return }
            let method = Envelope.string(bytes, env.method) ?? ""
            let params = env.params.map { Array(bytes[$0]) } ?? Array("null".utf8)
            hostCall(id, method, params, on: link)
        case .unlink:
            guard let id = env.id, let number = try? ProtocolJSON.decode(UnlinkOrder.self, from: bytes).link else { return }
            unlink(number, answering: id, on: link)
        case .cancel:
            guard let id = env.id else { return }
            state.withLock { $0.hostCalls.removeValue(forKey: id) }??.cancel()
        default:
            break  // `progress`: this client asks for nothing long.
        }
    }

    /// A plugin calls a method this client provides: its handler runs on a task, and its answer
    /// (or error) goes back unless the supervisor cancelled the call meanwhile.
    func hostCall(_ id: UInt64, _ method: String, _ params: [UInt8], on link: Link) {
        // Awaited from now on: the task may end before it is stored.
        let handler = state.withLock { s -> Handler? in
            s.hostCalls[id] = .some(nil)
            return s.methods[method]
        }
        let task = Task { [weak self] in
            let result: Result<[UInt8], ErrorBody>
            if let handler {
                do {
                    result = .success(try await handler(params))
                } catch let error as ErrorBody {
                    result = .failure(error)
                } catch {
                    result = .failure(ErrorBody(.pluginError, "the host's \(method) failed: \(error)"))
                }
            } else {
                result = .failure(ErrorBody(.notFound, "this client provides no method \(method)"))
            }
            guard let self, self.state.withLock({ $0.hostCalls.removeValue(forKey: id) }) != nil else { return }
            var reply = FrameBuilder(kind: .reply)
            reply.uint("id", id)
            switch result {
            case .success(let json): reply.raw("result", json)
            case .failure(let error): reply.error(code: error.code, error.message)
            }
            try? link.connection.sendFrame(reply.finish())
        }
        state.withLock { s in
            // Still awaited (not answered nor cancelled already): its task can be cancelled.
            if s.hostCalls[id] != nil { s.hostCalls[id] = task }
        }
    }
}
