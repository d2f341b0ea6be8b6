import Logging
import NIOCore
import PluginProtocol
import SupervisorCore

/// The methods a host provides to its plugins (SPEC §12): the program that embeds the supervisor
/// (`PluginHost.method`) or a control client (`provide`). A plugin calls one with a `call` whose
/// `target` is `@host`, allowed only where its manifest has `host.call:<method>` (or
/// `host.call:*`). The most recent provider of a method still there gets its calls: the program's
/// handler runs on a task of its own; a client gets a `call` frame on its connection and answers
/// with `reply`. The answer, the timeout or the caller's end settles each call, once, on the event
/// loop; a client that goes away fails its calls `unavailable` at once.
///
/// Whether a call goes to the program is the core's rule (`HostCallRule`: permission, provider,
/// at most `HostCallRule.inFlightLimit` of a worker's calls at once).
final class HostMethods: SupervisorComponent {
    let shared: Shared

    /// A method's body: the call's `params` JSON in, the result's JSON out (`PluginHost.method`
    /// decodes and encodes). A thrown `ErrorBody` goes to the plugin as it is; anything else as
    /// `pluginError`.
    typealias Handler = @Sendable ([UInt8]) async throws -> [UInt8]

    /// The target a plugin names to call its host.
    static let target = "@host"

    /// Who provides each method, oldest first: the last one gets its calls.
    private var providers: [String: [Provider]] = [:]
    /// The program's bodies, by method: set from the program's thread when it provides one (in
    /// effect at once, whatever the loop is doing), read here at each call.
    let programBodies: Guarded<[String: Handler]>

    private enum Provider {
        /// The program (its body in `programBodies`).
        case program
        case client(ControlConnection)

        func isClient(_ connection: ControlConnection) -> Bool {
            if case .client(let c) = self { c === connection } else { false }
        }
    }
    /// Calls running, by calling worker and the id its plugin gave them.
    private var running: [ObjectIdentifier: [UInt64: Running]] = [:]

    private final class Running {
        let method: String
        let started: NIODeadline
        var task: Task<Void, Never>?
        var deadline: Scheduled<Void>?
        /// A client's call: its connection and the id the supervisor gave it there.
        var client: (connection: ControlConnection, id: UInt64)?

        init(method: String, started: NIODeadline) {
            self.method = method
            self.started = started
        }
    }

    init(_ shared: Shared, programBodies: Guarded<[String: Handler]>) {
        self.shared = shared
        self.programBodies = programBodies
    }

    /// The embedding program provides `name` (its body already in `programBodies`): it comes
    /// before the clients that provided it earlier.
    func programProvides(_ name: String) {
        loop.preconditionInEventLoop()
        var stack = providers[name] ?? []
        stack.removeAll { if case .program = $0 { true } else { false } }
        stack.append(.program)
        providers[name] = stack
        countProviders()
    }

    private func countProviders() {
        metrics.hostMethodProviders = providers.values.reduce(0) { $0 + $1.count }
    }

    /// No plugin's call of a host method is being served (an upgrade waits for that).
    var isIdle: Bool { running.values.allSatisfy(\.isEmpty) }

    /// A control client provides `name` (its `provide` request): from now on it gets the calls.
    func provide(_ name: String, by connection: ControlConnection) {
        var stack = providers[name] ?? []
        stack.removeAll { $0.isClient(connection) }
        stack.append(.client(connection))
        providers[name] = stack
        connection.provides.insert(name)
        countProviders()
    }

    /// A providing client went away: its calls in flight fail `unavailable` now, and the methods
    /// fall back to their previous provider, if any.
    func providerGone(_ connection: ControlConnection) {
        guard !connection.provides.isEmpty else { return }
        for name in connection.provides {
            providers[name]?.removeAll { $0.isClient(connection) }
            if providers[name]?.isEmpty == true { providers[name] = nil }
        }
        connection.provides = []
        countProviders()
        let calls = connection.hostCalls
        connection.hostCalls = [:]
        for (_, call) in calls.sorted(by: { $0.key < $1.key }) {
            settle(call.caller, call.id, .failure(ErrorBody(.unavailable, "the client that provides this host method went away")), outcome: .unavailable)
        }
    }

    /// A client answered the call it got as `id` on its connection. A `reply` to an id it was
    /// never sent is a protocol violation (returned: the client is dropped with it).
    func clientReplied(_ connection: ControlConnection, id: UInt64, _ env: Envelope, _ bytes: UnsafeRawBufferPointer) -> ErrorBody? {
        guard let call = connection.hostCalls.removeValue(forKey: id) else {
            // Answered after its timeout or its caller's end: dropped, as a worker's late reply is.
            guard id == 0 || id >= connection.nextHostCallID else { return nil }
            return ErrorBody(.protocolViolation, "reply to id \(id), which this connection was never sent")
        }
        let result: Result<[UInt8], ErrorBody>
        if let e = env.error {
            result = .failure(Router.errorBody(bytes[e]))
        } else {
            result = .success(env.result.map { Array(bytes[$0]) } ?? Array("null".utf8))
        }
        settle(call.caller, call.id, result, outcome: env.error == nil ? .ok : .error)
        return nil
    }

    /// A plugin's `call` to `@host` (its fields checked by `Router.validateRequest`).
    func call(from caller: WorkerInstance, id: UInt64, _ env: Envelope, _ bytes: UnsafeRawBufferPointer) {
        guard let channel = caller.channel, let method = Envelope.string(bytes, env.method) else { return }
        let metrics = shared.metrics.calls(Self.target)
        func refuse(_ error: ErrorBody, _ outcome: CallHop.Outcome) {
            metrics.count(outcome)
            outbox.write(outbox.errorFrame(id: id, error, for: channel), to: channel)
        }
        // One the program provided a moment ago, which the loop has not ordered yet, is there too.
        let body = programBodies.withLock { $0[method] }
        let provider = providers[method]?.last ?? body.map { _ in .program }
        let key = ObjectIdentifier(caller)
        var calls = running[key] ?? [:]
        if let refused = HostCallRule.check(method: method, caller: caller.identifier, permissions: caller.manifest.permissions,
                                            provided: provider != nil, id: id, idInFlight: calls[id] != nil, inFlight: calls.count) {
            return refuse(refused.error, refused.outcome)
        }
        guard let provider else { return }
        let params = env.params.map { Array(bytes[$0]) } ?? Array("null".utf8)
        // The rule of every forwarded call (CallHop): its own timeout, else the host's default.
        let timeoutMs = config.isDebugged(caller.identifier) ? SupervisorConfig.longestTimeoutMs
            : CallHop.timeoutMs(requested: env.timeoutMs, otherwise: config.callTimeoutMs)
        let call = Running(method: method, started: .now())
        calls[id] = call
        running[key] = calls
        call.deadline = loop.assumeIsolated().scheduleTask(in: .milliseconds(Int64(timeoutMs))) { [self] in
            settle(caller, id, .failure(ErrorBody(.timeout, "the host did not answer \(method) in time")), outcome: .timeout)
        }
        let handler: Handler
        switch provider {
        case .client(let connection):
            let clientID = connection.nextHostCallID
            connection.nextHostCallID += 1
            connection.hostCalls[clientID] = (caller, id)
            call.client = (connection, clientID)
            var frame = outbox.encoder(.call, for: connection.channel, capacity: params.count + method.utf8.count + 96)
            frame.uint("id", clientID)
            frame.string("target", Self.target)
            frame.string("method", method)
            frame.raw("params", params)
            frame.string("from", caller.identifier)
            frame.uint("timeoutMs", UInt64(timeoutMs))
            outbox.write(frame.finish(), to: connection.channel)
            return
        case .program:
            guard let body else { return settle(caller, id, .failure(ErrorBody(.notFound, "the host provides no method \(method)")), outcome: .error) }
            handler = body
        }
        let back = handOff((methods: self, caller: caller))
        call.task = Task {
            let result: Result<[UInt8], ErrorBody>
            do {
                result = .success(try await handler(params))
            } catch let error as ErrorBody {
                result = .failure(error)
            } catch {
                if Task.isCancelled { return }  // settled already (timed out, or the caller ended)
                result = .failure(ErrorBody(.pluginError, "the host's \(method) failed: \(error)"))
            }
            back.execute { $0.methods.settle($0.caller, id, result, outcome: (try? result.get()) == nil ? .error : .ok) }
        }
    }

    /// Answers a call once: its handler's result, or its timeout (the handler is cancelled then).
    private func settle(_ caller: WorkerInstance, _ id: UInt64, _ result: Result<[UInt8], ErrorBody>, outcome: CallHop.Outcome) {
        let key = ObjectIdentifier(caller)
        guard let call = running[key]?.removeValue(forKey: id) else { return }
        if running[key]?.isEmpty == true { running[key] = nil }
        call.deadline?.cancel()
        if outcome == .timeout { call.task?.cancel() }
        if let client = call.client, client.connection.hostCalls.removeValue(forKey: client.id) != nil, outcome == .timeout {
            cancelAtClient(client.connection, client.id)
        }
        shared.metrics.calls(Self.target).record(outcome, nanoseconds: (NIODeadline.now() - call.started).nanoseconds)
        guard let channel = caller.channel else { return }
        // The program's answer must fit in one frame to the worker (which would take a larger one
        // as a protocol violation and end): too large is the host method's error, not the plugin's end.
        var result = result
        if case .success(let json) = result, json.count + 64 > config.maxFrameBytes {
            result = .failure(ErrorBody(.pluginError, "the host's \(call.method) answered \(json.count) bytes, over the frame limit of \(config.maxFrameBytes) (maxFrameBytes)"))
        }
        switch result {
        case .success(let json):
            var frame = outbox.encoder(.reply, for: channel, capacity: json.count + 32)
            frame.uint("id", id)
            frame.raw("result", json)
            outbox.write(frame.finish(), to: channel)
        case .failure(let error):
            outbox.write(outbox.errorFrame(id: id, error, for: channel), to: channel)
        }
    }

    /// The calling worker ended: its calls' handlers are cancelled, nobody reads their answers.
    func callerEnded(_ caller: WorkerInstance) {
        guard let calls = running.removeValue(forKey: ObjectIdentifier(caller)) else { return }
        for call in calls.values {
            call.deadline?.cancel()
            call.task?.cancel()
            if let client = call.client, client.connection.hostCalls.removeValue(forKey: client.id) != nil {
                cancelAtClient(client.connection, client.id)
            }
        }
    }

    /// Tells a providing client that nobody waits for its answer to `id` any more.
    private func cancelAtClient(_ connection: ControlConnection, _ id: UInt64) {
        guard !connection.closed else { return }
        var frame = outbox.encoder(.cancel, for: connection.channel)
        frame.uint("id", id)
        outbox.write(frame.finish(), to: connection.channel)
    }

    /// How many host method calls run now (the `supervisor_host_calls_in_flight` gauge).
    var inFlight: Int { running.values.reduce(0) { $0 + $1.count } }
}
