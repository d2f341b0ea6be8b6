#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif
import PluginProtocol
import Synchronization
#if canImport(Glibc)
import Glibc
#endif

/// Calls and opens to this plugin: each handler run as its method asks (on the delivering thread,
/// on a task made for it, on a kept task), tracked by call id so a `cancel` reaches it, and answered.
extension PluginRuntime {
    /// What runs a call's async handler, for a `cancel`.
    enum Running: Sendable {
        /// A task made for the call (a bytes method's).
        case task(Task<Void, Never>)
        /// A kept task, at the call's turn.
        case kept(CallTask, turn: UInt64)

        func cancel() {
            switch self {
            case .task(let task): task.cancel()
            case .kept(let task, let turn): task.cancel(turn: turn)
            }
        }
    }

    func handleCall(_ env: Envelope, _ bytes: UnsafeRawBufferPointer) {
        guard let id = env.id else { return }
        guard let method = Envelope.string(bytes, env.method) else {
            reply(id, error: PluginError.badRequest("call without a method"))
            return
        }
        guard let handler = api.handler(forMethod: method) else {
            let known = api.methodNames.joined(separator: ", ")
            reply(id, error: PluginError.notFound("no method '\(method)'; this plugin exports: \(known.isEmpty ? "nothing" : known)"))
            return
        }
        // Bytes it brought (owned by their `Bytes` values: closed when the last one goes).
        let attached = env.attachments == nil ? nil : Attached.read(env, in: bytes)
        switch handler {
        case .sync(let body):
            let params = env.params.map { UnsafeRawBufferPointer(rebasing: bytes[$0]) }
            if let attached { return Self.$attachments.withValue(attached) { replyWriting(id) { try body(params, &$0) } } }
            guard let t = env.traceparent else { return replyWriting(id) { try body(params, &$0) } }
            var trace = UnsafeRawBufferPointer(rebasing: bytes[t])
            withUnsafePointer(to: &trace) { pointer in
                pthread_setspecific(Self.syncTraceKey, pointer)
                defer { pthread_setspecific(Self.syncTraceKey, nil) }
                replyWriting(id) { try body(params, &$0) }
            }
        case .async(let decode, let execution):
            // The params are decoded here, once, from the message's own bytes (no copy for the
            // task); params that do not decode are answered at once, without a task.
            let params = env.params.map { UnsafeRawBufferPointer(rebasing: bytes[$0]) }
            let work: PluginAPI.AsyncWork
            do {
                work = try attached.map { list in try Self.$attachments.withValue(list) { try decode(params) } } ?? decode(params)
            } catch {
                return reply(id, error: error)
            }
            run(id, CarriedTrace(bytes, env.traceparent), execution, work)
        case .bytes(let body):
            runBytes(id, env, bytes, attached, body)
        case .stream(let body):
            serveStream(id, method, env, bytes, attached, body)
        }
    }

    /// A bytes method's call: run as an async method is, answered with the bytes attached.
    private func runBytes(_ id: UInt64, _ env: Envelope, _ bytes: UnsafeRawBufferPointer, _ attached: [Bytes]?,
                          _ body: @escaping @Sendable ([UInt8]?) async throws -> Bytes) {
        let params = env.params.map { Array(bytes[$0]) }
        let trace = CarriedTrace(bytes, env.traceparent)
        // Inserted under the lock the task's own clean-up takes, so clean-up never runs first.
        running.withLock { table in
            table[id] = .task(Task { [self] in
                let outcome: Result<Bytes, any Error>
                do {
                    outcome = .success(try await Self.$taskTraceparent.withValue(trace) {
                        try await Self.$attachments.withValue(attached) { try await body(params) }
                    })
                } catch { outcome = .failure(error) }
                running.withLock { _ = $0.removeValue(forKey: id) }
                // A cancelled call was already answered by the supervisor (timeout, caller gone).
                if Task.isCancelled { return }
                switch outcome {
                case .success(let result): reply(id, bytes: result)
                case .failure(let error): reply(id, error: error)
                }
            })
        }
    }

    func handleOpen(_ env: Envelope, _ bytes: UnsafeRawBufferPointer) {
        guard let id = env.id else { return }
        guard let text = Envelope.string(bytes, env.uri), let uri = PluginURI(text) else {
            reply(id, error: PluginError.badRequest("open needs a plugin:// URI"))
            return
        }
        guard case .async(let decode, let execution)? = api.handler(forPath: uri.path) else {
            reply(id, error: PluginError.notFound("no route for \(uri.path)"))
            return
        }
        let request = OpenRequest(uri: text, path: uri.path, query: uri.queryItems)
        let work: PluginAPI.AsyncWork
        do {
            work = try Coding.encode(request).withUnsafeBytes { try decode($0) }
        } catch {
            return reply(id, error: error)
        }
        run(id, CarriedTrace(bytes, env.traceparent), execution, work)
    }

    /// Runs an async handler on a kept task (`CallTask`), tracked by call id so a `cancel` can
    /// reach it; an inline one prefers the delivering thread (`DeliveryExecutor`). `attached`: bytes
    /// the handler reads itself (a stream method's, whose params it decodes on the task).
    func run(_ id: UInt64, _ trace: CarriedTrace?, _ execution: MethodExecution, attached: [Bytes]? = nil,
                     _ work: PluginAPI.AsyncWork) {
        let call = CallTask.Call(id: id, trace: trace, attached: attached, work: work)
        // Handed over under the lock that the call's own clean-up (`settle`) takes, so clean-up
        // never runs before the call is in the table.
        running.withLock { table in
            switch execution {
            case .task: table[id] = hand(call, to: callTasks, inline: false)
            case .inline: table[id] = hand(call, to: inlineCallTasks, inline: true)
            }
        }
    }

    /// Gives `call` to a waiting task of `pool`, or to a task made for it that the pool keeps
    /// afterwards.
    private func hand(_ call: CallTask.Call, to pool: CallTaskPool, inline: Bool) -> Running {
        while let task = pool.take() {
            if let turn = task.hand(call) { return .kept(task, turn: turn) }
        }
        // Detached: a kept task inherits no task-local value from where the call that made it
        // happened to be delivered, since it serves every call after that one. (Its priority is
        // the one `Task { }` gives on a delivering thread: medium, checked.)
        let task = CallTask.start { task in
            if inline {
                return Task.detached(executorPreference: DeliveryExecutor.shared) { [self] in await serve(task, call, pool) }
            }
            return Task.detached { [self] in await serve(task, call, pool) }
        }
        return .kept(task, turn: 0)
    }

    /// A kept task's body: answers `first`, then each call handed to it while the pool keeps it.
    /// Nothing of a call stays bound on the task after it (`answer` binds its task-locals around
    /// the method only).
    private func serve(_ task: CallTask, _ first: CallTask.Call, _ pool: CallTaskPool) async {
        keptTasks.add(1, ordering: .relaxed)
        defer { keptTasks.subtract(1, ordering: .releasing) }
        var call = first
        while true {
            await answer(call.id, call.trace, call.attached, call.work)
            guard task.endTurn(), pool.giveBack(task), let next = await task.park() else { return }
            call = next
        }
    }

    /// Runs an async handler's work on its task and answers the call.
    private func answer(_ id: UInt64, _ trace: CarriedTrace?, _ attached: [Bytes]?, _ work: PluginAPI.AsyncWork) async {
        // The async frames of a call's task are the task allocator's: 1 KB slabs, each a
        // `malloc` when first needed (a kept task keeps its slabs). What does not cross an `await`
        // is kept out of them (`settle`, and `request`'s `prepare`): with the trace bound, the
        // method, `context.call` and its continuation, a typed caller's frames fit in two slabs.
        let outcome: Result<any MethodResult, any Error>
        if let attached {
            outcome = await Self.$taskTraceparent.withValue(trace) { await Self.$attachments.withValue(attached) { await Self.outcome(of: work) } }
        } else if let trace {
            outcome = await Self.$taskTraceparent.withValue(trace) { await Self.outcome(of: work) }
        } else {
            outcome = await Self.outcome(of: work)
        }
        settle(id, outcome)
    }

    private static func outcome(of work: PluginAPI.AsyncWork) async -> Result<any MethodResult, any Error> {
        do { return .success(try await work.run()) } catch { return .failure(error) }
    }

    /// The call's task is done: forgotten, and answered unless cancelled (a cancelled call was
    /// already answered by the supervisor: timeout, caller gone).
    @inline(never)
    private func settle(_ id: UInt64, _ outcome: consuming Result<any MethodResult, any Error>) {
        running.withLock { _ = $0.removeValue(forKey: id) }
        if Task.isCancelled { return }
        switch outcome {
        case .success(let result): replyWriting(id) { try Coding.append(result, to: &$0) }
        case .failure(let error): reply(id, error: error)
        }
    }
}
