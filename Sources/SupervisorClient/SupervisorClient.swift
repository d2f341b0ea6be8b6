import CLinuxSupport
import IPC
import LinuxSupport
import PluginProtocol
import Protocol
import Synchronization
#if canImport(Glibc)
import Glibc
#endif

/// A program's connection to a running `supervisor start` (SPEC §12): the calls of `PluginHost`
/// (`call`, `open`, `send`, `status`, `events`, `method`) over the control socket, found as the CLI
/// finds it. Many calls may be in flight on one connection, from any number of tasks; a cancelled
/// task cancels its call (the plugin gets `cancel`). When the supervisor restarts, calls made
/// meanwhile wait for it up to their timeout, and the methods this client provides are provided
/// again. Throws `ErrorBody` (`.code`, `.message`), the plugin's or the supervisor's; `unavailable`
/// when no supervisor answers.
///
/// A guest in the program: one reader thread per connection, no signal handler, nothing printed.
/// Links neither SwiftNIO nor the supervisor.
///
/// ```swift
/// let client = try await SupervisorClient.connect()
/// let greeting = try await client.call("com.example.greeter", "greet", ["name": "Ada"], as: String.self)
/// for try await event in client.events(plugin: "com.example.greeter") { print(event.event) }
/// ```
public final class SupervisorClient: Sendable {
    public let socketPath: String
    /// How long a request waits for a supervisor that is not there (not started yet, restarting).
    public let reconnectWait: Duration
    /// Whether calls to a plugin go over a direct link to its worker once the supervisor has
    /// checked one (one hop; docs/protocol.md "Direct links for clients").
    public let directLinks: Bool
    /// Behind a pthread mutex (`Locked`), which the thread sanitizer sees (it does not see `Mutex`'s futex on Linux).
    private let state = Locked(State())

    /// A host method's body: the call's `params` JSON in, the result's JSON out.
    public typealias Handler = @Sendable ([UInt8]) async throws -> [UInt8]

    private struct State {
        var link: Link?
        var connections: UInt64 = 0
        var nextID: UInt64 = 1
        var waiting: [UInt64: Waiter] = [:]
        var streams: [UInt64: Follower] = [:]
        var methods: [String: Handler] = [:]
        /// Plugins' calls of this client's methods still awaited by the supervisor, by its id, with
        /// their tasks once made (a call cancelled or answered leaves).
        var hostCalls: [UInt64: Task<Void, Never>?] = [:]
        var closed = false
        var reproviding = false
        /// Direct links, by target.
        var links: [String: LinkSlot] = [:]
    }

    private enum LinkSlot {
        case asking
        case ready(DirectLink)
        /// Refused or failed: not asked again before this (monotonic ns).
        case refused(until: Int64)
    }

    private struct Waiter {
        let link: UInt64
        let continuation: CheckedContinuation<[UInt8], any Error>
    }

    private struct Follower {
        var link: UInt64?
        let plugin: String?
        let continuation: AsyncThrowingStream<HostEvent, any Error>.Continuation
    }

    /// One connection to the supervisor, read by a thread of its own.
    private final class Link: Sendable {
        let number: UInt64
        let connection: BlockingConnection
        init(number: UInt64, connection: BlockingConnection) {
            self.number = number
            self.connection = connection
        }
    }

    init(socketPath: String, reconnectWait: Duration, directLinks: Bool) {
        self.socketPath = socketPath
        self.reconnectWait = reconnectWait
        self.directLinks = directLinks
    }

    deinit {
        let (link, direct) = state.withLock { s in (s.link, s.links.values.compactMap { if case .ready(let l) = $0 { l } else { nil } }) }
        link?.connection.shutdown()
        for l in direct { l.close() }
    }

    /// Connects to the supervisor whose control socket is `socket`, else `$SUPERVISOR_SOCKET`, else
    /// `<home>/supervisor.sock` (`home`, else `$SUPERVISOR_HOME`, else the default home), waiting
    /// up to `wait` for one that is starting.
    public static func connect(home: String? = nil, socket: String? = nil, wait: Duration = .seconds(5),
                               directLinks: Bool = true) async throws -> SupervisorClient {
        let path = SupervisorLocation.socketPath(socket: socket, home: home, environment: ProcessEnvironment.all)
        let client = SupervisorClient(socketPath: path, reconnectWait: wait, directLinks: directLinks)
        _ = try await client.currentLink(waiting: wait)
        return client
    }

    /// Closes the connection: calls in flight fail `unavailable`, event streams end.
    public func close() {
        let (link, direct) = state.withLock { s -> (Link?, [DirectLink]) in
            s.closed = true
            let direct = s.links.values.compactMap { if case .ready(let l) = $0 { l } else { nil } }
            s.links = [:]
            return (s.link, direct)
        }
        link?.connection.shutdown()
        for l in direct { l.close() }
    }

    // MARK: The calls of SPEC §12

    /// Calls `method` of the plugin `target` with `params` and decodes its result. `timeout`
    /// defaults to the plugin's own (`limits.callTimeoutMs`).
    public func call<P: Encodable, R: Decodable>(_ target: String, _ method: String, _ params: P, as: R.Type = R.self,
                                                 timeout: Duration? = nil) async throws -> R {
        let json: [UInt8]
        do { json = try ProtocolJSON.encode(params) } catch {
            throw ErrorBody(.badRequest, "the params of \(target).\(method) cannot be encoded: \(error)")
        }
        return try Self.decode(R.self, try await callJSON(target, method, params: json, timeout: timeout), of: "\(target).\(method)")
    }

    /// Calls `method` of the plugin `target` without params.
    public func call<R: Decodable>(_ target: String, _ method: String, as: R.Type = R.self, timeout: Duration? = nil) async throws -> R {
        try Self.decode(R.self, try await callJSON(target, method, params: nil, timeout: timeout), of: "\(target).\(method)")
    }

    /// Calls with params and result as raw JSON: over the direct link to the plugin's worker when
    /// there is one, else through the supervisor (and then a link is asked for, for the next calls).
    public func callJSON(_ target: String, _ method: String, params: [UInt8]?, timeout: Duration? = nil) async throws -> [UInt8] {
        if let link = directLink(to: target), let answer = try await link.call(method: method, params: params, timeout: timeout) {
            return answer
        }
        let answer = try await request(.call, timeout: timeout) { b in
            b.string("target", target)
            b.string("method", method)
            if let params { b.raw("params", params) }
            if let timeout { b.uint("timeoutMs", Self.milliseconds(timeout)) }
        }
        askForLink(to: target)
        return answer
    }

    /// Opens `plugin://<identifier>/<path>?<query>` and decodes what the plugin answers.
    public func open<R: Decodable>(_ uri: String, as: R.Type = R.self) async throws -> R {
        try Self.decode(R.self, try await openJSON(uri), of: uri)
    }

    public func openJSON(_ uri: String) async throws -> [UInt8] {
        try await request(.open) { $0.string("uri", uri) }
    }

    /// Sends `memoryWarning`, `background` or `foreground` to every plugin, or to `plugin` alone;
    /// says which handled it. Throws when `plugin` is not installed or did not handle it.
    @discardableResult
    public func send(_ event: LifecycleEvent, to plugin: String? = nil) async throws -> SendOutcome {
        let outcome = try Self.decode(SendOutcome.self, try await request(.send) { b in
            b.string("name", event.rawValue)
            if let plugin { b.string("target", plugin) }
        }, of: "send")
        if let plugin, let why = outcome.failed[plugin] { throw ErrorBody(.unavailable, "\(plugin) did not handle \(event.rawValue): \(why)") }
        return outcome
    }

    /// Every plugin in start order, as `supervisor status --json` shows it.
    public func status() async throws -> [PluginStatus] {
        try Self.decode([PluginStatus].self, try await request(.status) { _ in }, of: "status")
    }

    /// Stops the plugin if it runs, clears its failure and restart history, starts it; returns its
    /// status once it runs.
    @discardableResult
    public func restart(_ identifier: String) async throws -> PluginStatus? {
        try Self.decode(PluginStatus?.self, try await request(.restart) { $0.string("target", identifier) }, of: "restart \(identifier)")
    }

    /// What happens to the plugins from now on (`started`, `exited`, `restarting`, `failed`,
    /// `updated`, `installed`, `uninstalled`; `dropped` when this reader fell behind: the
    /// supervisor never waits for it). `plugin` keeps one plugin's. Following starts at once on a
    /// connected client (a request this client makes after it is seen after it); `followEvents`
    /// returns once the supervisor has confirmed. The stream ends with `unavailable` if the
    /// supervisor goes away; ending it (or its task's cancellation) stops following.
    public func events(plugin: String? = nil) -> AsyncThrowingStream<HostEvent, any Error> {
        let (stream, continuation) = AsyncThrowingStream.makeStream(of: HostEvent.self, throwing: (any Error).self,
                                                                    bufferingPolicy: .bufferingOldest(1_024))
        let id = takeID()
        state.withLock { $0.streams[id] = Follower(link: nil, plugin: plugin, continuation: continuation) }
        continuation.onTermination = { [weak self] _ in self?.unfollow(id) }
        Task {
            do {
                _ = try await self.request(.events, id: id) { b in if let plugin { b.string("target", plugin) } }
            } catch {
                continuation.finish(throwing: error)
            }
        }
        return stream
    }

    /// `events`, returned once the supervisor follows them for this client.
    public func followEvents(plugin: String? = nil) async throws -> AsyncThrowingStream<HostEvent, any Error> {
        let (stream, continuation) = AsyncThrowingStream.makeStream(of: HostEvent.self, throwing: (any Error).self,
                                                                    bufferingPolicy: .bufferingOldest(1_024))
        let id = takeID()
        state.withLock { $0.streams[id] = Follower(link: nil, plugin: plugin, continuation: continuation) }
        continuation.onTermination = { [weak self] _ in self?.unfollow(id) }
        do {
            _ = try await request(.events, id: id) { b in if let plugin { b.string("target", plugin) } }
        } catch {
            continuation.finish(throwing: error)
            throw error
        }
        return stream
    }

    /// Provides the host method `name` to plugins whose manifest allows it (`host.call:<name>`);
    /// they call it with `context.callHost(name, params, as:)`. What `body` throws reaches the
    /// plugin as `pluginError` (an `ErrorBody` as it is); one that does not return within the
    /// call's timeout is cancelled and answered `timeout`. The most recent provider of a name gets
    /// its calls (docs/protocol.md, "Host programs").
    public func method<P: Decodable & Sendable, R: Encodable & Sendable>(_ name: String, _ body: @escaping @Sendable (P) async throws -> R) async throws {
        try await methodJSON(name) { json in
            let params: P
            do { params = try ProtocolJSON.decode(P.self, from: json) } catch {
                throw ErrorBody(.badRequest, "the params of the host's \(name) do not fit: \(error)")
            }
            let result = try await body(params)
            do { return try ProtocolJSON.encode(result) } catch {
                throw ErrorBody(.pluginError, "the host's \(name) returned what cannot be encoded: \(error)")
            }
        }
    }

    /// Provides a host method with params and result as raw JSON.
    public func methodJSON(_ name: String, _ handler: @escaping Handler) async throws {
        state.withLock { $0.methods[name] = handler }
        _ = try await request(.provide) { $0.string("method", name) }
    }

    // MARK: Requests

    private func takeID() -> UInt64 {
        state.withLock { s in
            defer { s.nextID += 1 }
            return s.nextID
        }
    }

    /// One request, answered once; the task's cancellation gives it up (and cancels its call at
    /// the plugin).
    private func request(_ kind: MessageKind, id: UInt64? = nil, timeout: Duration? = nil,
                         _ fill: (inout FrameBuilder) -> Void) async throws -> [UInt8] {
        let link = try await currentLink(waiting: timeout ?? reconnectWait)
        let id = id ?? takeID()
        var builder = FrameBuilder(kind: kind)
        builder.uint("id", id)
        fill(&builder)
        let frame = builder.finish()
        return try await withTaskCancellationHandler {
            try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<[UInt8], any Error>) in
                let live = state.withLock { s -> Bool in
                    guard s.link === link else { return false }
                    s.waiting[id] = Waiter(link: link.number, continuation: continuation)
                    if kind == .events { s.streams[id]?.link = link.number }
                    return true
                }
                guard live else {
                    return continuation.resume(throwing: ErrorBody(.unavailable, "the connection to the supervisor was lost"))
                }
                if Task.isCancelled { return giveUp(id, link) }
                do {
                    try link.connection.sendFrame(frame)
                } catch {
                    if let waiter = state.withLock({ $0.waiting.removeValue(forKey: id) }) {
                        waiter.continuation.resume(throwing: ErrorBody(.unavailable, "the connection to the supervisor was lost: \(error)"))
                    }
                }
            }
        } onCancel: {
            giveUp(id, link)
        }
    }

    /// The calling task was cancelled: its request fails now, and the supervisor is told.
    private func giveUp(_ id: UInt64, _ link: Link) {
        guard let waiter = state.withLock({ $0.waiting.removeValue(forKey: id) }) else { return }
        waiter.continuation.resume(throwing: CancellationError())
        send(cancelOf: id, on: link)
    }

    private func send(cancelOf id: UInt64, on link: Link) {
        var cancel = FrameBuilder(kind: .cancel)
        cancel.uint("id", id)
        try? link.connection.sendFrame(cancel.finish())
    }

    private func unfollow(_ id: UInt64) {
        let found = state.withLock { s -> (Follower?, Link?) in (s.streams.removeValue(forKey: id), s.link) }
        if found.0 != nil, let link = found.1 { send(cancelOf: id, on: link) }
    }

    // MARK: The connection

    /// The connection, made (again) when there is none: a supervisor that is not there yet is
    /// waited for, up to `waiting`.
    private func currentLink(waiting: Duration) async throws -> Link {
        if let link = state.withLock({ $0.link }) { return link }
        let deadline = ContinuousClock.now + waiting
        while true {
            if state.withLock({ $0.closed }) { throw ErrorBody(.unavailable, "the client is closed") }
            do {
                return adopt(try BlockingConnection.connect(path: socketPath))
            } catch {
                let notYet = error.errno == ENOENT || error.errno == ECONNREFUSED
                guard notYet, ContinuousClock.now < deadline else {
                    throw ErrorBody(.unavailable, "cannot reach the supervisor at \(socketPath) (\(error)); is `supervisor start` running with this home or socket?")
                }
                try await Task.sleep(for: .milliseconds(20))
            }
        }
    }

    /// A new connection becomes the client's (unless another task made one first) and gets its reader.
    private func adopt(_ connection: BlockingConnection) -> Link {
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
            while let frame = try? link.connection.receiveFrame() {
                guard let self else { break }
                self.received(frame, on: link)
            }
            self?.ended(link)
            link.connection.close()
        }
        // What this client provided is provided again (after a supervisor's restart).
        for name in methods.sorted() {
            var provide = FrameBuilder(kind: .provide)
            provide.uint("id", takeID())
            provide.string("method", name)
            try? link.connection.sendFrame(provide.finish())
        }
        return link
    }

    /// The connection ended: what waited on it fails, its event streams end, and a client that
    /// provides methods connects again in the background to keep providing them.
    private func ended(_ link: Link) {
        let (waiters, followers, calls, reconnect) = state.withLock { s -> ([Waiter], [Follower], [Task<Void, Never>], Bool) in
            guard s.link === link else { return ([], [], [], false) }
            s.link = nil
            let waiters = s.waiting.values.filter { $0.link == link.number }
            s.waiting = s.waiting.filter { $0.value.link != link.number }
            let followers = s.streams.values.filter { $0.link == link.number }
            s.streams = s.streams.filter { $0.value.link != link.number }
            let calls = s.hostCalls.values.compactMap { $0 }
            s.hostCalls = [:]
            let reconnect = !s.closed && !s.methods.isEmpty && !s.reproviding
            if reconnect { s.reproviding = true }
            return (waiters, followers, calls, reconnect)
        }
        let gone = ErrorBody(.unavailable, "the connection to the supervisor was lost")
        for waiter in waiters { waiter.continuation.resume(throwing: gone) }
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
    private func received(_ frame: [UInt8], on link: Link) {
        frame.withUnsafeBytes { bytes in
            guard let env = try? Envelope.parse(bytes), let kind = env.kind else { return }
            switch kind {
            case .reply:
                guard let id = env.id, let waiter = state.withLock({ $0.waiting.removeValue(forKey: id) }) else { return }
                if let e = env.error {
                    let body = (try? ProtocolJSON.decode(ErrorBody.self, from: UnsafeRawBufferPointer(rebasing: bytes[e])))
                        ?? ErrorBody(.pluginError, String(decoding: bytes[e], as: UTF8.self))
                    waiter.continuation.resume(throwing: body)
                } else {
                    waiter.continuation.resume(returning: env.result.map { Array(bytes[$0]) } ?? Array("null".utf8))
                }
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
    }

    /// A plugin calls a method this client provides: its handler runs on a task, and its answer
    /// (or error) goes back unless the supervisor cancelled the call meanwhile.
    private func hostCall(_ id: UInt64, _ method: String, _ params: [UInt8], on link: Link) {
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

    // MARK: Direct links

    /// The plugins this client calls over a direct link now.
    public var linkedPlugins: [String] {
        state.withLock { s in s.links.compactMap { if case .ready = $0.value { $0.key } else { nil } }.sorted() }
    }

    private func directLink(to target: String) -> DirectLink? {
        state.withLock { s in if case .ready(let link) = s.links[target] { link } else { nil } }
    }

    /// After a call went through the supervisor (so it has checked it): a direct link for the next
    /// ones, asked for in the background, once.
    private func askForLink(to target: String) {
        guard directLinks else { return }
        let now = ProcessControl.monotonicNanoseconds()
        let ask = state.withLock { s -> Bool in
            switch s.links[target] {
            case .asking?, .ready?: return false
            case .refused(let until)? where until > now: return false
            default:
                guard !s.closed else { return false }
                s.links[target] = .asking
                return true
            }
        }
        guard ask else { return }
        Task { [weak self] in await self?.establishLink(to: target) }
    }

    private func establishLink(to target: String) async {
        do {
            let grant = try Self.decode(LinkGrant.self, try await request(.link) { $0.string("target", target) }, of: "link")
            let fd = try Self.pickUp(grant)
            let link = DirectLink(number: grant.link, target: target, timeoutMs: grant.timeoutMs, fd: fd,
                                  report: { [weak self] report in self?.sendControl(report) },
                                  ended: { [weak self] link in self?.linkEnded(link) })
            let kept = state.withLock { s -> Bool in
                guard !s.closed, case .asking? = s.links[target] else { return false }
                s.links[target] = .ready(link)
                return true
            }
            if !kept { link.close() }
        } catch {
            // Not now (switched off, not running, debugged): asked again later.
            state.withLock { s in
                if case .asking? = s.links[target] { s.links[target] = .refused(until: ProcessControl.monotonicNanoseconds() + 5_000_000_000) }
            }
        }
    }

    /// Picks the link's descriptor up where the grant says (a one-time token for it).
    private static func pickUp(_ grant: LinkGrant) throws -> Int32 {
        let handoff = try BlockingConnection.connect(path: grant.socket)
        defer { handoff.close() }
        var limit = timeval(tv_sec: 2, tv_usec: 0)
        setsockopt(handoff.fd, SOL_SOCKET, SO_RCVTIMEO, &limit, socklen_t(MemoryLayout<timeval>.size))
        try handoff.sendFrame(ProtocolJSON.frame(["token": grant.token]))
        var buffer = [UInt8](repeating: 0, count: 512)
        var fd: Int32 = -1
        let n = buffer.withUnsafeMutableBytes { cls_receive_with_fd(handoff.fd, $0.baseAddress, $0.count, &fd) }
        guard n > 4, fd >= 0 else {
            if fd >= 0 { Glibc.close(fd) }
            throw ErrorBody(.unavailable, "the link's descriptor was not handed over: \(String(decoding: buffer.prefix(max(0, n)).dropFirst(4), as: UTF8.self))")
        }
        // A received descriptor is checked before it is used: a stream socket, nothing else.
        var info = stat()
        guard fstat(fd, &info) == 0, (info.st_mode & S_IFMT) == S_IFSOCK else {
            Glibc.close(fd)
            throw ErrorBody(.unavailable, "the link's descriptor is not a socket")
        }
        return fd
    }

    /// A link's counts (`linkCalls`), on the control connection.
    private func sendControl(_ report: CallHop.LinkCalls) {
        guard let link = state.withLock({ $0.link }), let frame = try? ProtocolJSON.frame(report) else { return }
        try? link.connection.sendFrame(frame)
    }

    private func linkEnded(_ link: DirectLink) {
        state.withLock { s in
            if case .ready(let current)? = s.links[link.target], current === link { s.links[link.target] = nil }
        }
    }

    /// The supervisor takes link `number` back (its worker is stopping): calls go through the
    /// supervisor from now on, and the link is given back once its calls are settled.
    private func unlink(_ number: UInt64, answering id: UInt64, on control: Link) {
        let link = state.withLock { s -> DirectLink? in
            for (target, slot) in s.links {
                if case .ready(let l) = slot, l.number == number {
                    s.links[target] = nil
                    return l
                }
            }
            return nil
        }
        let answer: @Sendable () -> Void = {
            var reply = FrameBuilder(kind: .reply)
            reply.uint("id", id)
            reply.raw("result", Array("null".utf8))
            try? control.connection.sendFrame(reply.finish())
        }
        if let link { link.unlink(answer) } else { answer() }
    }

    private struct UnlinkOrder: Decodable {
        var link: UInt64
    }

    private struct LinkGrant: Decodable {
        var link: UInt64
        var token: String
        var socket: String
        var timeoutMs: Int
    }

    // MARK: Coding

    static func decode<R: Decodable>(_ type: R.Type, _ json: [UInt8], of what: String) throws -> R {
        do { return try ProtocolJSON.decode(R.self, from: json) } catch {
            throw ErrorBody(.badRequest, "the answer of \(what) is not a \(R.self): \(error)")
        }
    }

    static func milliseconds(_ duration: Duration) -> UInt64 {
        let (seconds, attoseconds) = duration.components
        return UInt64(max(1, seconds * 1000 + attoseconds / 1_000_000_000_000_000))
    }
}
