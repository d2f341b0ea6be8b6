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
public final class SupervisorClient: PluginCaller {
    /// The control socket this client connects to (again, after the supervisor restarts).
    public let socketPath: String
    /// How long a request waits for a supervisor that is not there (not started yet, restarting).
    public let reconnectWait: Duration
    /// Whether calls to a plugin go over a direct link to its worker once the supervisor has
    /// checked one (one hop; docs/protocol.md "Direct links for clients").
    public let directLinks: Bool
    /// How long a direct link's thread polls for the next reply before it sleeps, at most, as
    /// `connect` was told (its links keep it within 0…`maxLinkPollMicroseconds`).
    public let linkPollMicroseconds: Int
    /// `linkPollMicroseconds` unless `connect` is told otherwise (and `PluginHost.Configuration`'s):
    /// a little more than a lone call's time here, so the reply of a call made right after the last
    /// one is caught.
    public static let defaultLinkPollMicroseconds = 50
    /// The longest a link's thread polls, whatever it is told (a negative value is 0): longer than
    /// any wake-up it could save.
    public static let maxLinkPollMicroseconds = 10_000
    /// Behind a pthread mutex (`Guarded`), which the thread sanitizer sees (it does not see `Mutex`'s futex on Linux).
    let state = Guarded(State())
    /// Its direct links, by plugin (DirectLinks.swift).
    let links = DirectLinks(retryAfterNanoseconds: 5_000_000_000)

    /// A host method's body: the call's `params` JSON in, the result's JSON out.
    public typealias Handler = @Sendable ([UInt8]) async throws -> [UInt8]

    struct State {
        var link: Link?
        var connections: UInt64 = 0
        var nextID: UInt64 = 1
        var waiting: [UInt64: Waiter] = [:]
        var streams: [UInt64: Follower] = [:]
        /// Its calls answered with a stream (SupervisorClient+Streams.swift), by id.
        var streamCalls: [UInt64: StreamCall] = [:]
        /// The requests of `callBytes` (an entry from before the request is sent), with the bytes
        /// attached to their answers once they came; other answers' bytes are not taken (their
        /// tokens expire at the supervisor).
        var attached: [UInt64: [AttachedBytes]] = [:]
        var methods: [String: Handler] = [:]
        /// Plugins' calls of this client's methods still awaited by the supervisor, by its id, with
        /// their tasks once made (a call cancelled or answered leaves).
        var hostCalls: [UInt64: Task<Void, Never>?] = [:]
        var closed = false
        var reproviding = false
    }

    struct Waiter {
        let link: UInt64
        let continuation: CheckedContinuation<[UInt8], any Error>
    }

    struct Follower {
        var link: UInt64?
        let plugin: String?
        let continuation: AsyncThrowingStream<HostEvent, any Error>.Continuation
    }

    /// One connection to the supervisor, read by a thread of its own.
    final class Link: Sendable {
        let number: UInt64
        let connection: BlockingConnection
        init(number: UInt64, connection: BlockingConnection) {
            self.number = number
            self.connection = connection
        }
    }

    init(socketPath: String, reconnectWait: Duration, directLinks: Bool, linkPollMicroseconds: Int) {
        self.socketPath = socketPath
        self.reconnectWait = reconnectWait
        self.directLinks = directLinks
        self.linkPollMicroseconds = linkPollMicroseconds
    }

    deinit {
        state.withLock { $0.link }?.connection.shutdown()
        links.closeAll()
    }

    /// Connects to the supervisor whose control socket is `socket`, else `$SUPERVISOR_SOCKET`, else
    /// `<home>/supervisor.sock` (`home`, else `$SUPERVISOR_HOME`, else the default home), waiting
    /// up to `wait` for one that is starting. `linkPollMicroseconds`: how long a direct link's thread
    /// polls for the next reply before it sleeps, at most (adapted to how close together replies
    /// come, one link's thread of the program at a time: docs/host.md, "The path of a call"); 0: never,
    /// at most `maxLinkPollMicroseconds`.
    ///
    /// - Throws: `ErrorBody` `unavailable` when no supervisor answers within `wait`.
    public static func connect(home: String? = nil, socket: String? = nil, wait: Duration = .seconds(5),
                               directLinks: Bool = true,
                               linkPollMicroseconds: Int = SupervisorClient.defaultLinkPollMicroseconds) async throws -> SupervisorClient {
        let path = SupervisorLocation.socketPath(socket: socket, home: home, environment: ProcessEnvironment.all)
        let client = SupervisorClient(socketPath: path, reconnectWait: wait, directLinks: directLinks,
                                      linkPollMicroseconds: linkPollMicroseconds)
        _ = try await client.currentLink(waiting: wait)
        return client
    }

    /// Closes the connection: calls in flight fail `unavailable`, event streams end.
    public func close() {
        let link = state.withLock { s -> Link? in
            s.closed = true
            return s.link
        }
        link?.connection.shutdown()
        links.closeAll()
    }

    // MARK: The calls of SPEC §12

    /// Calls with params and result as raw JSON: over the direct link to the plugin's worker when
    /// there is one, else through the supervisor (and then a link is asked for, for the next calls).
    public func callJSON(_ target: String, _ method: String, params: [UInt8]?, timeout: Duration? = nil) async throws -> [UInt8] {
        var route = ThroughSupervisor(timeout: timeout)
        if let answer = try await links.call(target, method, params: params, route: &route) { return answer }
        let answer: [UInt8]
        do {
            answer = try await request(.call, timeout: route.timeout) { [route] b in
                b.string("target", target)
                b.string("method", method)
                if let params { b.raw("params", params) }
                if let timeout = route.timeout { b.uint("timeoutMs", HostCoding.milliseconds(timeout)) }
                if let afterLink = route.afterLink { b.raw("afterLink", afterLink.json) }
            }
        } catch let error as ErrorBody where route.afterLink != nil && Self.unanswered(error) {
            // In flight on a link whose worker ended, and no supervisor took it back (killed, its
            // workers with it): it may have run.
            throw ErrorBody(code: error.code, message: "the direct link to \(target) ended with the call in flight, and the supervisor could not take it back: \(error.message)",
                            data: ErrorData(started: true))
        }
        askForLink(to: target)
        return answer
    }

    /// Calls `method` of `target` with raw bytes (SPEC §13): `params` name them `{"$bytes": i}`,
    /// `i` their index in `sending` (`AttachedBytes.from(array)`, `.file(path)`; inline up to 64
    /// KiB, else a sealed memfd handed in at the supervisor's handoff socket: no base64, and the
    /// supervisor never reads them). The descriptors stay the caller's. Through the supervisor.
    public func callJSON(_ target: String, _ method: String, params: [UInt8]?, sending: [AttachedBytes], timeout: Duration? = nil) async throws -> [UInt8] {
        let announced = try AttachedBytes.announce(sending, socketPath: socketPath)
        return try await request(.call, timeout: timeout, tail: announced.tail) { b in
            b.string("target", target)
            b.string("method", method)
            if let params { b.raw("params", params) }
            if let timeout { b.uint("timeoutMs", HostCoding.milliseconds(timeout)) }
            b.attachments(announced.attachments)
        }
    }

    /// Calls `method` of `target`, which answers with raw bytes (SPEC §13: `api.bytes` in the Swift
    /// SDK; a result `{"$bytes": i}` with the bytes attached): inline ones as an array, larger ones
    /// as the sealed memfd the plugin made, picked up from the supervisor and checked. The caller
    /// owns a descriptor (`close()` it, or `write(to:)`/`copy()` it first). Through the supervisor:
    /// a direct link carries no descriptors.
    public func callBytes<P: Encodable>(_ target: String, _ method: String, _ params: P, timeout: Duration? = nil) async throws -> AttachedBytes {
        let json = try HostCoding.encode(params, for: "\(target).\(method)")
        let id = takeID()
        state.withLock { $0.attached[id] = [] }
        let result: [UInt8]
        do {
            result = try await request(.call, id: id, timeout: timeout) { b in
                b.string("target", target)
                b.string("method", method)
                b.raw("params", json)
                if let timeout { b.uint("timeoutMs", HostCoding.milliseconds(timeout)) }
            }
        } catch {
            for bytes in state.withLock({ $0.attached.removeValue(forKey: id) }) ?? [] { bytes.close() }
            throw error
        }
        let attached = state.withLock { $0.attached.removeValue(forKey: id) } ?? []
        return try AttachedBytes.pick(attached, for: result, of: "\(target).\(method)")
    }

    /// Opens a URI and returns what the plugin answers as raw JSON.
    public func openJSON(_ uri: String) async throws -> [UInt8] {
        try await request(.open) { $0.string("uri", uri) }
    }

    /// Sends `memoryWarning`, `background` or `foreground` to every plugin, or to `plugin` alone;
    /// says which handled it. Throws when `plugin` is not installed or did not handle it.
    @discardableResult
    public func send(_ event: LifecycleEvent, to plugin: String? = nil) async throws -> SendOutcome {
        let outcome = try HostCoding.decode(SendOutcome.self, try await request(.send) { b in
            b.string("name", event.rawValue)
            if let plugin { b.string("target", plugin) }
        }, of: "send")
        if let plugin, let why = outcome.failed[plugin] { throw ErrorBody(.unavailable, "\(plugin) did not handle \(event.rawValue): \(why)") }
        return outcome
    }

    /// Replaces the running supervisor with `binary` (default: the path it was started from) in
    /// place, without stopping a plugin (SPEC §14): answered by the new binary once it has taken
    /// over; an error (`badRequest`, `unavailable`) names why when the old one carries on. This
    /// client's connection, its event streams and the methods it provides go on across it.
    public func upgrade(binary: String? = nil, timeout: Duration = .seconds(30)) async throws -> UpgradeOutcome {
        struct Answer: Decodable { var upgraded: UpgradeOutcome }
        return try HostCoding.decode(Answer.self, try await request(.upgrade, timeout: timeout) { b in
            if let binary { b.object("params", ["binary": .string(binary)]) }
        }, of: "upgrade").upgraded
    }

    /// Every plugin in start order, as `supervisor status --json` shows it.
    public func status() async throws -> [PluginStatus] {
        try HostCoding.decode([PluginStatus].self, try await request(.status) { _ in }, of: "status")
    }

    /// Stops the plugin if it runs, clears its failure and restart history, starts it; returns its
    /// status once it runs.
    @discardableResult
    public func restart(_ identifier: String) async throws -> PluginStatus? {
        try HostCoding.decode(PluginStatus?.self, try await request(.restart) { $0.string("target", identifier) }, of: "restart \(identifier)")
    }

    /// What happens to the plugins from now on (`started`, `exited`, `restarting`, `failed`,
    /// `updated`, `installed`, `uninstalled`; `dropped` when this reader fell behind: the
    /// supervisor never waits for it). `plugin` keeps one plugin's. Following starts at once on a
    /// connected client (a request this client makes after it is seen after it); `followEvents`
    /// returns once the supervisor has confirmed. The stream ends with `unavailable` if the
    /// supervisor goes away; ending it (or its task's cancellation) stops following.
    public func events(plugin: String? = nil) -> AsyncThrowingStream<HostEvent, any Error> {
        let (stream, continuation, id) = follower(plugin: plugin)
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
        let (stream, continuation, id) = follower(plugin: plugin)
        do {
            _ = try await request(.events, id: id) { b in if let plugin { b.string("target", plugin) } }
        } catch {
            continuation.finish(throwing: error)
            throw error
        }
        return stream
    }

    /// A stream of events for `events` and `followEvents`, registered under a new request id (its
    /// `events` request goes out with that id); ending the stream stops following.
    private func follower(plugin: String?) -> (AsyncThrowingStream<HostEvent, any Error>, AsyncThrowingStream<HostEvent, any Error>.Continuation, UInt64) {
        let (stream, continuation) = AsyncThrowingStream.makeStream(of: HostEvent.self, throwing: (any Error).self,
                                                                    bufferingPolicy: .bufferingOldest(1_024))
        let id = takeID()
        state.withLock { $0.streams[id] = Follower(link: nil, plugin: plugin, continuation: continuation) }
        continuation.onTermination = { [weak self] _ in self?.unfollow(id) }
        return (stream, continuation, id)
    }

    /// Provides the host method `name` to plugins whose manifest allows it (`host.call:<name>`);
    /// they call it with `context.callHost(name, params, as:)`. What `body` throws reaches the
    /// plugin as `pluginError` (an `ErrorBody` as it is); one that does not return within the
    /// call's timeout is cancelled and answered `timeout`. The most recent provider of a name gets
    /// its calls (docs/protocol.md, "Host programs").
    ///
    /// On a connected client the `provide` goes out at once, before anything this client asks
    /// afterwards; otherwise it goes out when the client connects (again).
    public func method<P: Decodable & Sendable, R: Encodable & Sendable>(_ name: String, _ body: @escaping @Sendable (P) async throws -> R) {
        methodJSON(name, HostCoding.method(name, body))
    }

    /// Provides a host method with params and result as raw JSON.
    public func methodJSON(_ name: String, _ handler: @escaping Handler) {
        let link = state.withLock { s -> Link? in
            s.methods[name] = handler
            return s.link
        }
        // A connection made from now on provides it (`adopt`); this one is told now.
        if let link { provide(name, on: link) }
    }
}
