#if canImport(Glibc)
import Glibc
#endif
import LinuxSupport
import Logging
import PluginProtocol
import Protocol
import ServiceLifecycle
import SupervisorClient
import SupervisorKit

/// The supervisor inside a Swift program (SPEC §12), as go-plugin's host and ELMaestro's supervisor
/// live inside theirs: the same plugins, sandbox, restarts and installs as `supervisor start`, with
/// calls that go from the program straight to the plugin's worker (one hop), the plugins' events as
/// an `AsyncSequence`, and methods the program provides to its plugins (`@host`).
///
/// A guest in the program: it installs no signal handler unless asked (`handlesSignals`), prints
/// nothing, logs through the `Logger` it is given, and is a swift-service-lifecycle `Service`: in a
/// `ServiceGroup` it starts with the group and stops its plugins in reverse dependency order on the
/// group's graceful shutdown. Its workers end with the program, whatever ends it.
///
/// ```swift
/// let host = PluginHost(configuration: .init(pluginFolders: ["plugins"], home: "/tmp/home"), logger: logger)
/// try await withThrowingDiscardingTaskGroup { group in
///     group.addTask { try await host.run() }
///     try await host.waitUntilReady()
///     let greeting = try await host.call("com.example.greeter", "greet", ["name": "Ada"], as: String.self)
///     await host.shutdown()
/// }
/// ```
public final class PluginHost: Service, PluginCaller {
    /// What this host runs: its plugin folders, home and settings, as given to `init`.
    public let configuration: Configuration
    let supervisor: Supervisor
    private let logger: Logger
    private let phase = Guarded(Phase.idle)
    /// Settled when every startable plugin has started (or the host failed or stopped first).
    private let ready = Signal<Result<Void, ErrorBody>>()
    /// Settled when `run` has ended (every worker stopped).
    private let stopped = Signal<Void>()
    /// Direct links to workers, by plugin: after a call through the supervisor's checks, the next
    /// calls go from the calling task straight to the worker's link (no event loop in between).
    let links = DirectLinks(retryAfterNanoseconds: 1_000_000_000)

    private enum Phase {
        case idle
        case running
        case stopped
        /// `shutdown()` came first: `run` returns at once.
        case stoppedBeforeRun

        /// `run()` has not been called (nor `shutdown()`).
        var isIdle: Bool { if case .idle = self { true } else { false } }
    }

    /// A host that runs `configuration` and logs through `logger`; nothing starts until `run()`.
    public init(configuration: Configuration, logger: Logger) {
        self.configuration = configuration
        self.logger = logger
        supervisor = Supervisor(config: configuration.settings, logger: logger)
    }

    deinit {
        links.closeAll()
        supervisor.close()
    }

    // MARK: Running

    /// Starts the plugins and serves until `shutdown()`, the group's graceful shutdown, or this
    /// task's cancellation; returns once every worker has stopped (at once when `shutdown()` came
    /// first). Throws when the host cannot start at all (its home is another supervisor's, its
    /// control socket is taken, …), or when it has run already.
    public func run() async throws {
        let before = phase.withLock { phase in
            defer { if case .idle = phase { phase = .running } }
            return phase
        }
        switch before {
        case .idle: break
        case .stoppedBeforeRun: return
        case .running, .stopped: throw ErrorBody(.badRequest, "this PluginHost has run already; make a new one")
        }
        let supervisor = self.supervisor
        try await withGracefulShutdownHandler {
            try await withTaskCancellationHandler {
                try await serve()
            } onCancel: {
                supervisor.requestShutdown(reason: "the host's task was cancelled")
            }
        } onGracefulShutdown: {
            supervisor.requestShutdown(reason: "the host's service group is shutting down")
        }
    }

    /// Runs the supervisor on a thread of its own (`Supervisor.run` blocks until the end).
    private func serve() async throws {
        let supervisor = self.supervisor
        let ready = self.ready
        let outcome: Result<Void, SupervisorError> = await withCheckedContinuation { continuation in
            Threads.start(name: "plugin-host") {
                do throws(SupervisorError) {
                    try supervisor.run(keepingLoop: true) { _ in ready.settle(.success(())) }
                    continuation.resume(returning: .success(()))
                } catch {
                    continuation.resume(returning: .failure(error))
                }
            }
        }
        phase.withLock { $0 = .stopped }
        // The signals are the program's again (handlesSignals): a Ctrl-C after this ends it.
        supervisor.releaseSignals()
        switch outcome {
        case .success:
            ready.settle(.failure(ErrorBody(.unavailable, "the plugin host stopped before its plugins were ready")))
        case .failure(let error):
            ready.settle(.failure(ErrorBody(.unavailable, "the plugin host could not start: \(error)")))
        }
        stopped.settle(())
        try outcome.get()
    }

    /// Returns once every startable plugin has started (the moment `supervisor start` prints its
    /// ready line); throws if the host stops or fails first. Nothing starts before `run()`: waiting
    /// 5 s with no `run()` logs a warning that says so (it waits on, for a `run()` called late).
    public func waitUntilReady() async throws {
        guard isIdle else { return try await ready.value.get() }
        let reminder = Task { [phase, logger] in
            try await Task.sleep(for: .seconds(5))
            guard phase.withLock({ $0.isIdle }) else { return }
            logger.warning("waitUntilReady() has waited 5 s and run() has not been called: the host starts its plugins in run(); call it in a task of its own (group.addTask { try await host.run() }) before waiting")
        }
        defer { reminder.cancel() }
        try await ready.value.get()
    }

    /// What a request before `run()` gets.
    static let notRunning = ErrorBody(.unavailable, "the plugin host is not running: call run() in a task of its own, then waitUntilReady(), before calling it")

    /// `run()` has not been called (nor `shutdown()`).
    var isIdle: Bool { phase.withLock { $0.isIdle } }

    /// How many supervisors (running, or stopped and not yet freed) this process holds: for the
    /// package's tests that a released host leaves nothing behind.
    package static var supervisorsAlive: Int { Supervisor.enginesAlive }

    /// Stops every plugin in reverse dependency order (each gets `willTerminate` and a grace
    /// period) and returns once all have stopped; `run` returns then too. During start-up, during
    /// an update, twice, or before `run`: it ends cleanly.
    public func shutdown() async {
        let wasIdle = phase.withLock { phase in
            guard case .idle = phase else { return false }
            phase = .stoppedBeforeRun
            return true
        }
        if wasIdle {
            ready.settle(.failure(ErrorBody(.unavailable, "the plugin host was shut down before it ran")))
            stopped.settle(())
            return
        }
        supervisor.requestShutdown(reason: "the host program asked (PluginHost.shutdown)")
        await stopped.value
    }

    // MARK: Calls (SPEC §12): the primitives of `PluginCaller`, which adds the typed calls

    /// Calls with params and result as raw JSON (no decoding on either side).
    public func callJSON(_ target: String, _ method: String, params: [UInt8]?, timeout: Duration? = nil) async throws -> [UInt8] {
        var route = ThroughSupervisor(timeout: timeout)
        if let answer = try await links.call(target, method, params: params, route: &route) { return answer }
        var frame = Self.callFrame(target, method, params: params, timeout: route.timeout)
        if let afterLink = route.afterLink { frame.raw("afterLink", afterLink.json) }
        let answer = try await request(frame.finish())
        askForLink(to: target)
        return answer
    }

    /// A `call` request's fields, for the loop (`request`).
    static func callFrame(_ target: String, _ method: String, params: [UInt8]?, timeout: Duration?) -> FrameBuilder {
        var frame = FrameBuilder(kind: .call, capacity: (params?.count ?? 0) + target.utf8.count + method.utf8.count + 64)
        frame.uint("id", 0)
        frame.string("target", target)
        frame.string("method", method)
        if let params { frame.raw("params", params) }
        if let timeout { frame.uint("timeoutMs", HostCoding.milliseconds(timeout)) }
        return frame
    }

    /// Opens a URI and returns what the plugin answers as raw JSON.
    public func openJSON(_ uri: String) async throws -> [UInt8] {
        var frame = FrameBuilder(kind: .open, capacity: uri.utf8.count + 48)
        frame.uint("id", 0)
        frame.string("uri", uri)
        return try await request(frame.finish())
    }

    /// Sends `memoryWarning`, `background` or `foreground` to every plugin, or to `plugin` alone;
    /// says which handled it. Throws when `plugin` is not installed or did not handle it.
    @discardableResult
    public func send(_ event: LifecycleEvent, to plugin: String? = nil) async throws -> SendOutcome {
        var frame = FrameBuilder(kind: .send)
        frame.uint("id", 0)
        frame.string("name", event.rawValue)
        if let plugin { frame.string("target", plugin) }
        let outcome = try HostCoding.decode(SendOutcome.self, try await request(frame.finish()), of: "send")
        if let plugin, let why = outcome.failed[plugin] { throw ErrorBody(.unavailable, "\(plugin) did not handle \(event.rawValue): \(why)") }
        return outcome
    }

    /// Every plugin in start order, as `supervisor status --json` shows it.
    public func status() async throws -> [PluginStatus] {
        var frame = FrameBuilder(kind: .status)
        frame.uint("id", 0)
        return try HostCoding.decode([PluginStatus].self, try await request(frame.finish()), of: "status")
    }

    /// What happens to the plugins from now on (`started`, `exited`, `restarting`, `failed`,
    /// `updated`, `installed`, `uninstalled`; `dropped` when this reader fell behind: the host never
    /// waits for it), until the host stops. `plugin` keeps one plugin's.
    public func events(plugin: String? = nil) -> HostEvents {
        HostEvents(base: supervisor.events(plugin: plugin))
    }

    /// Provides the host method `name` to plugins whose manifest allows it (`host.call:<name>` or
    /// `host.call:*`); they call it with `context.callHost(name, params, as:)` (`target: "@host"`).
    /// What `body` throws reaches the plugin as `pluginError` (an `ErrorBody` as it is); one that
    /// does not return within the call's timeout is cancelled and answered `timeout`.
    public func method<P: Decodable & Sendable, R: Encodable & Sendable>(_ name: String, _ body: @escaping @Sendable (P) async throws -> R) {
        supervisor.provide(method: name, HostCoding.method(name, body))
    }

    // MARK: Managing plugins

    /// Stops the plugin if it runs, clears its failure and restart history, starts it; returns its
    /// status once it runs.
    @discardableResult
    public func restart(_ identifier: String) async throws -> PluginStatus? {
        var frame = FrameBuilder(kind: .restart)
        frame.uint("id", 0)
        frame.string("target", identifier)
        return try HostCoding.decode(PluginStatus?.self, try await request(frame.finish()), of: "restart \(identifier)")
    }

    /// Installs a signed bundle archive (a path or URL) as `supervisor install` does; returns once
    /// the new version runs (or was rolled back, which throws).
    public func install(_ source: String, options: InstallOptions = InstallOptions(),
                        progress: (@Sendable (ProgressReport) -> Void)? = nil) async throws {
        var frame = FrameBuilder(kind: .install)
        frame.uint("id", 0)
        frame.string("uri", source)
        frame.raw("params", try ProtocolJSON.encode(options))
        _ = try await request(frame.finish(), progress: progress)
    }

    /// Updates every plugin the catalog (the `catalog` setting) has a newer version of.
    @discardableResult
    public func update(progress: (@Sendable (ProgressReport) -> Void)? = nil) async throws -> UpdateOutcome {
        var frame = FrameBuilder(kind: .update)
        frame.uint("id", 0)
        return try HostCoding.decode(UpdateOutcome.self, try await request(frame.finish(), progress: progress), of: "update")
    }

    /// Stops the plugin and removes its installed bundle.
    public func uninstall(_ identifier: String) async throws {
        var frame = FrameBuilder(kind: .uninstall)
        frame.uint("id", 0)
        frame.string("target", identifier)
        _ = try await request(frame.finish())
    }

    /// The Prometheus text of the host's metrics (what `supervisor metrics` prints).
    public func metrics() async throws -> String {
        var frame = FrameBuilder(kind: .metrics)
        frame.uint("id", 0)
        return try HostCoding.decode(String.self, try await request(frame.finish()), of: "metrics")
    }

    // MARK: The one way in

    /// One request, answered once; the task's cancellation gives it up (and cancels its call at
    /// the plugin).
    func request(_ frame: [UInt8], progress: (@Sendable (ProgressReport) -> Void)? = nil,
                 bytes: (@Sendable (Supervisor.HostBytes) -> Void)? = nil) async throws -> [UInt8] {
        // Before `run()` no plugin is loaded: every call would be `notFound`, which blames the plugin.
        if isIdle { throw Self.notRunning }
        let ticket = Guarded<TicketState>(.waiting)
        let supervisor = self.supervisor
        let result: Result<[UInt8], ErrorBody> = await withTaskCancellationHandler {
            await withCheckedContinuation { continuation in
                let made = supervisor.submit(frame, progress: progress, bytes: bytes) { continuation.resume(returning: $0) }
                let cancelled = ticket.withLock { state in
                    if case .cancelled = state { return true }
                    state = .submitted(made)
                    return false
                }
                if cancelled { supervisor.cancel(made, with: Self.cancelled) }
            }
        } onCancel: {
            let made: Supervisor.HostTicket? = ticket.withLock { state in
                defer { state = .cancelled }
                if case .submitted(let t) = state { return t }
                return nil
            }
            if let made { supervisor.cancel(made, with: Self.cancelled) }
        }
        if Task.isCancelled, case .failure(let error) = result, error == Self.cancelled { throw CancellationError() }
        return try result.get()
    }

    private enum TicketState {
        case waiting
        case submitted(Supervisor.HostTicket)
        case cancelled
    }

    private static let cancelled = ErrorBody(.unavailable, "the calling task was cancelled")

}

/// The events of an embedded host (`PluginHost.events()`).
public struct HostEvents: AsyncSequence, Sendable {
    /// Each event is a `HostEvent`.
    public typealias Element = HostEvent
    /// The iterator's error type; it never throws: the sequence ends when the host stops.
    public typealias Failure = any Error
    let base: AsyncStream<HostEvent>

    /// An iterator over the events from now on.
    public func makeAsyncIterator() -> AsyncIterator { AsyncIterator(base: base.makeAsyncIterator()) }

    /// Reads the host's events one at a time.
    public struct AsyncIterator: AsyncIteratorProtocol {
        var base: AsyncStream<HostEvent>.AsyncIterator
        /// The next event; nil once the host has stopped.
        public mutating func next() async throws -> HostEvent? { await base.next() }
    }
}

/// A value set once that any number of tasks wait for. Its lock is a pthread mutex (`Guarded`), which
/// the thread sanitizer sees, unlike the contended path of Synchronization's `Mutex`.
final class Signal<Value: Sendable>: Sendable {
    private let state = Guarded<(value: Value?, waiters: [CheckedContinuation<Value, Never>])>((nil, []))

    /// The first value given wins; later ones are ignored.
    func settle(_ value: Value) {
        let waiters: [CheckedContinuation<Value, Never>] = state.withLock { s in
            guard s.value == nil else { return [] }
            s.value = value
            defer { s.waiters = [] }
            return s.waiters
        }
        for waiter in waiters { waiter.resume(returning: value) }
    }

    var value: Value {
        get async {
            await withCheckedContinuation { continuation in
                let now: Value? = state.withLock { s in
                    if let value = s.value { return value }
                    s.waiters.append(continuation)
                    return nil
                }
                if let now { continuation.resume(returning: now) }
            }
        }
    }
}
