import LinuxSupport
import NIOCore
import PluginProtocol
import Protocol
import SupervisorCore

/// The supervisor inside another program (SPEC §12; `PluginHost` is built on this): requests go
/// through the same checks as the control socket's and straight to the workers' sockets (one hop),
/// events and host methods without a socket at all. Callable from any thread: everything is handed
/// to the event loop.
/// A request from the embedding program, waiting for the loop to take it.
struct HostSubmission: Sendable {
    let frame: [UInt8]
    let request: HostRequest
}

extension Supervisor {
    /// A request in flight from the embedding program, to cancel it.
    public struct HostTicket: Sendable {
        fileprivate let request: HostRequest
    }

    /// Does the control request `frame` (as `FrameBuilder.finish()` makes it: `type` and its fields,
    /// as a client sends it; the `id` is not used) and calls `done` once, on the event loop, with the result's JSON or the error.
    /// `progress` hears installs' and updates' progress. A call to a plugin that is starting waits
    /// for it (SPEC §8), up to its timeout.
    @discardableResult
    public func submit(_ frame: [UInt8], progress: (@Sendable (ProgressReport) -> Void)? = nil, stream: HostStreamHandlers? = nil,
                       bytes: (@Sendable (HostBytes) -> Void)? = nil,
                       _ done: @escaping @Sendable (Result<[UInt8], ErrorBody>) -> Void) -> HostTicket {
        let request = HostRequest(on: loop, progress: progress, stream: stream, bytes: bytes, done)
        // Requests made while the loop has not yet taken the earlier ones join them: one task on the
        // loop (and at most one wake-up) per batch, not per request.
        let first = hostInbox.withLock { inbox in
            inbox.append(HostSubmission(frame: frame, request: request))
            return inbox.count == 1
        }
        if first { engine.execute { [hostInbox] in Self.take(hostInbox, into: $0) } }
        return HostTicket(request: request)
    }

    /// Does the requests the program submitted since the last batch, on the loop.
    private static func take(_ hostInbox: Guarded<[HostSubmission]>, into engine: Engine) {
        let batch = hostInbox.withLock { inbox in
            defer { inbox.removeAll(keepingCapacity: true) }
            return inbox
        }
        for submission in batch {
            let request = submission.request
            submission.frame.withUnsafeBytes { whole in
                let bytes = UnsafeRawBufferPointer(rebasing: whole[min(whole.count, Frame.headerSize)...])
                let env: Envelope
                do { env = try Envelope.parse(bytes, maxDepth: engine.config.maxJSONDepth) } catch {
                    return request.settle(.failure(ErrorBody(.badRequest, "invalid request: \(error)")))
                }
                guard let kind = env.kind else {
                    return request.settle(.failure(ErrorBody(.badRequest, "unknown request type '\(env.typeName(in: bytes) ?? "(none)")'")))
                }
                engine.handle(kind, env, bytes, origin: .host(request))
            }
        }
    }

    /// Gives up on a request: it fails with `error`, and a call already at its plugin is
    /// cancelled there (the plugin gets `cancel`). Nothing happens to a request already answered.
    public func cancel(_ ticket: HostTicket, with error: ErrorBody) {
        let request = ticket.request
        engine.execute { engine in
            guard !request.isSettled else { return }
            let inFlight = request.inFlight
            request.settle(.failure(error))
            if let (callee, id) = inFlight {
                engine.shared.cancelInFlight([id: (callee, id)])
            }
        }
    }

    /// The bytes attached to an answer (SPEC §13), handed to the program just before the answer
    /// itself: the attachments as the answer lists them (its `{"$bytes": i}` values refer to them
    /// by index), the descriptors of those passed as sealed memfds (in their order; the program's
    /// to map and close), and the inline ones' bytes, concatenated in their order.
    public struct HostBytes: Sendable {
        public let attachments: [Attachment]
        public let descriptors: [Int32]
        public let inline: [UInt8]
    }

    /// Where the chunks of a stream call's answer and the credit for its input go (SPEC §13), on
    /// the event loop: hand them on, never wait there.
    public struct HostStreamHandlers: Sendable {
        public var chunk: @Sendable ([UInt8]) -> Void
        public var inputCredit: @Sendable (UInt64) -> Void

        public init(chunk: @escaping @Sendable ([UInt8]) -> Void, inputCredit: @escaping @Sendable (UInt64) -> Void = { _ in }) {
            self.chunk = chunk
            self.inputCredit = inputCredit
        }
    }

    /// The program's side of a stream call in flight (`submit(_:stream:_:)`): a `credit` for its
    /// answer or a `chunk` of its input, as `StreamFrames` writes them (the `id` is not used). One
    /// the protocol does not allow (more input than its credit, say) fails the call with
    /// `protocolViolation` and cancels it at the plugin. Nothing happens once the call is settled.
    public func streamFrame(_ ticket: HostTicket, _ frame: [UInt8]) {
        let request = ticket.request
        engine.execute { engine in
            guard !request.isSettled, let entry = request.inFlight else { return }
            frame.withUnsafeBytes { whole in
                let bytes = UnsafeRawBufferPointer(rebasing: whole[min(whole.count, Frame.headerSize)...])
                guard let env = try? Envelope.parse(bytes), let kind = env.kind, kind == .chunk || kind == .credit else {
                    return request.settle(.failure(ErrorBody(.badRequest, "not a chunk or credit frame")))
                }
                guard let why = engine.router.fromCaller(kind, entry, env, bytes) else { return }
                request.settle(.failure(ErrorBody(.protocolViolation, why)))
                engine.shared.cancelInFlight([entry.id: entry])
            }
        }
    }

    /// What happens to plugins from now on (every plugin's, or `plugin`'s alone), until the
    /// supervisor stops or the stream is dropped. A reader that falls behind hears `dropped`.
    public func events(plugin: String? = nil) -> AsyncStream<HostEvent> {
        // Made on the loop so no event published meanwhile is half-seen; a caller on the loop
        // itself (a host method's handler never is) would deadlock, hence the check.
        if loop.inEventLoop { return engine.value.events.listen(plugin: plugin) }
        return (try? loop.submit { [engine] in engine.value.events.listen(plugin: plugin) }.wait()) ?? AsyncStream { $0.finish() }
    }

    /// Provides the host method `name` to plugins allowed to call it (`host.call:<name>`); the
    /// handler gets the call's `params` JSON and returns the result's JSON (or throws). In effect
    /// when it returns, from any thread and without waiting for the loop: a plugin's call of it
    /// read after that finds it (the loop then puts it before the clients that provided it earlier).
    public func provide(method name: String, _ handler: @escaping @Sendable ([UInt8]) async throws -> [UInt8]) {
        hostMethodBodies.withLock { $0[name] = handler }
        engine.execute { $0.hostMethods.programProvides(name) }
    }

    /// The embedding program's end of a direct link to `target`'s worker (one hop, as a client's:
    /// docs/protocol.md "Direct links for clients"), or nil when there can be none now. `unlink`
    /// is called (on any thread) when the worker is to stop: the program stops sending over link
    /// `number` and calls `given` once the calls over it are settled. The descriptor is the
    /// caller's to close.
    public func linkForHost(to target: String,
                            unlink: @escaping @Sendable (_ number: UInt64, _ given: @escaping @Sendable () -> Void) -> Void) async -> HostLink? {
        await withCheckedContinuation { (continuation: CheckedContinuation<HostLink?, Never>) in
            engine.execute { engine in
                let caller = engine.hostCaller(unlink)
                continuation.resume(returning: engine.router.linkHost(caller, to: target).map { HostLink(fd: $0.fd, number: $0.link, timeoutMs: $0.timeoutMs) })
            }
        }
    }

    /// The counts of the calls the program sent over its direct links, for the metrics.
    public func reportLinkCalls(_ report: CallHop.LinkCalls) {
        engine.execute { engine in
            guard let caller = engine.hostLinks else { return }
            engine.router.hostLinkCalls(caller, report)
        }
    }

    /// A direct link handed to the embedding program.
    public struct HostLink: Sendable {
        public let fd: Int32
        public let number: UInt64
        /// The plugin's call timeout, for calls that name none.
        public let timeoutMs: Int
    }

    /// Starts the shutdown (SPEC §7's, in reverse dependency order), as SIGTERM does; `run` returns
    /// once every worker has ended. Again, or after the end: nothing more happens.
    public func requestShutdown(reason: String) {
        engine.execute { $0.lifecycle.shutdown(reason: reason) }
    }
}
