#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif
import CPluginABI
import PluginProtocol
import Synchronization
#if canImport(Glibc)
import Glibc
#endif

/// Carries one `Pluggable` over the C ABI: decodes what the worker delivers, runs handlers, sends
/// replies, and matches replies to this plugin's own outgoing calls.
final class PluginRuntime: Sendable {
    let plugin: any Pluggable
    let api = PluginAPI()
    /// The worker's host table; valid, and safe to call from any thread, for the process's life.
    private nonisolated(unsafe) let host: UnsafePointer<sp_host>
    private let nextID = Atomic<UInt64>(1)
    private let pending = Guarded<[UInt64: UnsafeContinuation<Answer, any Error>]>([:])
    /// The calls whose async handler runs, by id: what a `cancel` reaches.
    private let running = Guarded<[UInt64: Running]>([:])
    /// How many calls' async handlers run now.
    var runningCalls: Int { running.withLock { $0.count } }
    /// Tasks kept for async methods' calls (`CallTask`): those on Swift's global executor, and
    /// those that run inline methods on the delivering threads (`DeliveryExecutor`).
    let callTasks = CallTaskPool(limit: 64)
    let inlineCallTasks = CallTaskPool(limit: 64)
    /// How many kept tasks exist (waiting or running a call): one that ends has settled its last
    /// call, so a test can wait for it rather than for time to pass.
    private let keptTasks = Atomic<Int>(0)
    var keptTaskCount: Int { keptTasks.load(ordering: .acquiring) }
    /// The streams in flight (SPEC §13), both ways.
    private let streams = Guarded(StreamTables())
    private let events: AsyncStream<EventWork>.Continuation
    /// The plugin's `startup` while it runs: a `willTerminate` cancels it (the plugin is being
    /// stopped; its stop should not wait for a start nobody needs any more).
    private let starting = Guarded<(task: Task<Void, any Error>?, stopping: Bool)>((nil, false))

    /// The `traceparent` of the call or open an async handler is handling (SPEC §3): a call this
    /// plugin makes while handling it carries it on, so the trace follows the request through every
    /// plugin it touches.
    @TaskLocal static var taskTraceparent: CarriedTrace?

    /// The bytes attached to the message being decoded (`Bytes.init(from:)`): a call's, while its
    /// handler runs; an answer's, while it is decoded.
    @TaskLocal static var attachments: [Bytes]?

    /// An answer to one of this plugin's calls: its result and the bytes it brought.
    struct Answer: Sendable {
        /// Its result's JSON, copied out of the reply (inline when small).
        var result: SmallBytes?
        var attachments: [Bytes]?
    }

    /// A sync handler runs on the worker's I/O thread while the message's bytes are valid: its
    /// traceparent is those bytes, found through a thread-specific pointer and decoded only if the
    /// plugin asks (no string, no task-local binding on the fastest calls).
    private static let syncTraceKey: pthread_key_t = {
        var key = pthread_key_t()
        pthread_key_create(&key, nil)
        return key
    }()

    /// The traceparent of the request being handled by this task or, in a sync handler, this thread.
    static var traceparent: String? {
        if let t = taskTraceparent { return t.text }
        guard let raw = pthread_getspecific(syncTraceKey) else { return nil }
        let bytes = raw.assumingMemoryBound(to: UnsafeRawBufferPointer.self).pointee
        return Envelope.string(bytes, 0..<bytes.count)
    }

    struct StreamTables {
        /// Calls to this plugin answered with a stream, by the supervisor's id: where credit goes.
        var answering: [UInt64: StreamSender] = [:]
        /// The input of calls to this plugin that came with one, by the supervisor's id.
        var reading: [UInt64: ChunkReceiver] = [:]
        /// This plugin's own stream calls, by its id: where their chunks go.
        var awaiting: [UInt64: ChunkReceiver] = [:]
        /// The input this plugin sends with its own stream calls, and the task sending it.
        var feeding: [UInt64: (sender: StreamSender, task: Task<Void, Never>?)] = [:]
    }

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

    struct EventWork: Sendable {
        var id: UInt64
        var name: String
        var payload: [UInt8]?
    }

    init(plugin: any Pluggable, host: UnsafePointer<sp_host>) {
        self.plugin = plugin
        self.host = host
        let (stream, continuation) = AsyncStream<EventWork>.makeStream()
        self.events = continuation
        plugin.exports(api)
        // Lifecycle events run one at a time, in the order they came. The loop holds the runtime
        // until `shutdown` ends the stream (the worker holds it until then too): a weak reference
        // would give the runtime a side table, and every retain and release of it on the call
        // path would take the slow path (profiled: 3 % of a busy links thread).
        Task { [self] in
            for await work in stream {
                await self.handleEvent(work)
            }
        }
    }

    // MARK: Incoming

    /// One message from the worker. What it makes ready of inline methods (`.inline`) runs on
    /// this thread before it returns.
    func receive(_ bytes: UnsafeRawBufferPointer) {
        DeliveryExecutor.shared.delivering { handle(bytes) }
    }

    private func handle(_ bytes: UnsafeRawBufferPointer) {
        let env: Envelope
        do {
            env = try Envelope.parse(bytes)
        } catch {
            log(.error, "dropped an invalid message from the supervisor: \(error)")
            return
        }
        guard let kind = env.kind else { return }
        switch kind {
        case .call: handleCall(env, bytes)
        case .open: handleOpen(env, bytes)
        case .event:
            guard let id = env.id else { return }
            let name = Envelope.string(bytes, env.name) ?? ""
            // Events run one at a time: without this, `willTerminate` would wait behind a
            // `startup` still running until the supervisor's grace period ended the worker.
            if name == EventName.willTerminate.rawValue {
                starting.withLock { s in
                    s.stopping = true
                    return s.task
                }?.cancel()
            }
            events.yield(EventWork(id: id, name: name, payload: env.payload.map { Array(bytes[$0]) }))
        case .reply:
            guard let id = env.id else { return }
            let continuation = pending.withLock { $0.removeValue(forKey: id) }
            guard let continuation else { return streamEnded(id, env, bytes) }
            if let errorRange = env.error {
                let body = (try? ProtocolJSON.decode(ErrorBody.self, from: UnsafeRawBufferPointer(rebasing: bytes[errorRange])))
                    ?? ErrorBody(.pluginError, "malformed error")
                continuation.resume(throwing: PluginError(code: body.code, message: body.message))
            } else {
                continuation.resume(returning: Answer(result: env.result.map { SmallBytes(UnsafeRawBufferPointer(rebasing: bytes[$0])) },
                                                      attachments: env.attachments == nil ? nil : Attached.read(env, in: bytes)))
            }
        case .cancel:
            guard let id = env.id else { return }
            running.withLock { $0.removeValue(forKey: id) }?.cancel()
        case .chunk:
            guard let id = env.id else { return }
            // Its element: raw bytes (an element of `Bytes`), or its JSON.
            let data = StreamFrames.element(of: env).map { Array(bytes[$0.range]) } ?? Array("null".utf8)
            if env.input {
                guard let receiver = streams.withLock({ $0.reading[id] }) else { return }
                if env.end { receiver.finish(.success(())) } else { receiver.received(data) }
            } else {
                streams.withLock { $0.awaiting[id] }?.received(data)
            }
        case .credit:
            guard let id = env.id, let n = env.n else { return }
            if env.input {
                streams.withLock { $0.feeding[id]?.sender }?.gate.grant(n)
            } else {
                streams.withLock { $0.answering[id] }?.gate.grant(n)
            }
        default:
            break
        }
    }

    private func handleCall(_ env: Envelope, _ bytes: UnsafeRawBufferPointer) {
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
            guard env.stream else {
                return reply(id, error: PluginError.badRequest("\(method) answers with a stream: call it with \"stream\": true (supervisor call --stream, stream(...) in the host libraries, context.stream in a plugin)"))
            }
            let sender = StreamSender(id: id, runtime: self)
            // Strong, as the stream's sender holds it: a weak reference would give the runtime a side
            // table for good, and every later retain and release of it would take the slow path.
            let input = ChunkReceiver(grant: { [self] n in
                _ = send(StreamFrames.credit(id: id, n: UInt64(n), input: true, into: [UInt8]()))
            }, giveUp: {})
            streams.withLock { s in
                s.answering[id] = sender
                if env.input { s.reading[id] = input }
            }
            // The input's first window is the reader's to grant (the caller sends nothing before it).
            if env.input {
                _ = send(StreamFrames.credit(id: id, n: UInt64(StreamFrames.initialCredit), input: true, into: [UInt8]()))
            } else {
                input.finish(.success(()))
            }
            let params = env.params.map { Array(bytes[$0]) }
            run(id, CarriedTrace(bytes, env.traceparent), .task, attached: attached, ClosureCall { [self] in
                defer {
                    streams.withLock { s in
                        s.answering[id] = nil
                        s.reading[id] = nil
                    }
                }
                try await body(params, input, sender)
                return Empty()
            })
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

    /// The final reply of one of this plugin's stream calls: its stream ends.
    private func streamEnded(_ id: UInt64, _ env: Envelope, _ bytes: UnsafeRawBufferPointer) {
        let (receiver, feeder) = streams.withLock { s in (s.awaiting.removeValue(forKey: id), s.feeding.removeValue(forKey: id)) }
        feeder?.task?.cancel()
        guard let receiver else { return }
        if let errorRange = env.error {
            let body = (try? ProtocolJSON.decode(ErrorBody.self, from: UnsafeRawBufferPointer(rebasing: bytes[errorRange])))
                ?? ErrorBody(.pluginError, "malformed error")
            receiver.finish(.failure(PluginError(code: body.code, message: body.message)))
        } else {
            receiver.finish(.success(()))
        }
    }

    private func handleOpen(_ env: Envelope, _ bytes: UnsafeRawBufferPointer) {
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
    private func run(_ id: UInt64, _ trace: CarriedTrace?, _ execution: MethodExecution, attached: [Bytes]? = nil,
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

    private func handleEvent(_ work: EventWork) async {
        do {
            switch EventName(rawValue: work.name) {
            case .startup:
                let payload = try work.payload.map { (bytes) throws(JSONReadingError) in try StartupPayload(reading: bytes) }
                let ctx = PluginContext(
                    runtime: self, identifier: payload?.identifier ?? "", version: payload?.version ?? "",
                    dataDirectory: payload?.dataDirectory ?? "", bundleDirectory: payload?.bundleDirectory ?? "",
                    liveDirectory: payload?.liveDirectory)
                try checkDeclarations(payload)
                let plugin = self.plugin
                let task = Task { try await plugin.startup(ctx) }
                // A `willTerminate` that came before this line cancels it here.
                if starting.withLock({ s in s.task = task; return s.stopping }) { task.cancel() }
                defer { starting.withLock { $0.task = nil } }
                do {
                    try await task.value
                } catch is CancellationError {
                    throw PluginError(.unavailable, "startup was cancelled: the plugin is being stopped")
                }
            case .launch: await plugin.launch()
            case .willTerminate: await plugin.willTerminate()
            case .memoryWarning:
                // The tasks kept for later calls go first (each holds its object and a slab).
                callTasks.trim()
                inlineCallTasks.trim()
                await plugin.memoryWarning()
            case .background: await plugin.background()
            case .foreground: await plugin.foreground()
            case .resourceUpdated:
                struct P: Decodable { var name: String; var path: String }
                if let raw = work.payload, let p = try? JSONDecoder().decode(P.self, from: Data(raw)) {
                    await plugin.resourceUpdated(name: p.name, path: p.path)
                }
            case .dependencyRestarted:
                struct P: Decodable { var identifier: String }
                if let raw = work.payload, let p = try? JSONDecoder().decode(P.self, from: Data(raw)) {
                    await plugin.dependencyRestarted(p.identifier)
                }
            case nil:
                break  // Unknown events are acknowledged; newer supervisors may send more.
            }
            reply(work.id, result: Array("null".utf8))
        } catch {
            reply(work.id, error: error)
        }
    }

    /// The type's own identifier and dependencies must agree with the manifest it was loaded under.
    private func checkDeclarations(_ payload: StartupPayload?) throws {
        let type = Swift.type(of: plugin)
        guard let payload else { return }
        if !type.identifier.isEmpty, type.identifier != payload.identifier {
            // A code of its own: the supervisor fails the plugin at once (a restart cannot cure it).
            throw PluginError(code: "identifierMismatch",
                              message: "this library implements \(type.identifier) but was loaded as \(payload.identifier): set \"identifier\": \"\(type.identifier)\" in \(payload.bundleDirectory)/plugin.json, or give the library a bundle of its own")
        }
        let manifest = Set(payload.dependencies ?? [])
        let undeclared = type.dependencies.filter { !manifest.contains($0) }
        if !undeclared.isEmpty {
            throw PluginError(code: "dependencyMismatch",
                              message: "the plugin needs \(undeclared.joined(separator: ", ")), missing from the dependencies in \(payload.bundleDirectory)/plugin.json: add \(undeclared.count == 1 ? "it" : "them") there")
        }
    }

    // MARK: Outgoing

    /// Sends a call (or an open) and waits for its answer. `params` appends the params' JSON
    /// straight into the frame and returns the bytes they refer to (`{"$bytes": i}`), sent with it.
    func request(kind: MessageKind, target: String? = nil, method: String? = nil, uri: String? = nil,
                 params: (inout [UInt8]) throws -> [Bytes]) async throws -> Answer {
        try await request(kind: kind, target: target, method: method, uri: uri, hasParams: true, params: params)
    }

    /// An open, or a call without params.
    func request(kind: MessageKind, target: String? = nil, method: String? = nil, uri: String? = nil) async throws -> Answer {
        try await request(kind: kind, target: target, method: method, uri: uri, hasParams: false) { _ in [] }
    }

    private func request(kind: MessageKind, target: String?, method: String?, uri: String?, hasParams: Bool,
                         params: (inout [UInt8]) throws -> [Bytes]) async throws -> Answer {
        var out = try prepare(kind: kind, target: target, method: method, uri: uri, hasParams: hasParams, params: params)
        // Unsafe, not checked: the table is the continuation's one owner, and every path resumes
        // it once (the answer, a failed send, the shutdown), under its lock.
        return try await withUnsafeThrowingContinuation { send(&out, answeredThrough: $0) }
    }

    /// Sends a request whose answer resumes `continuation` (or resumes it with the failure).
    private func send(_ out: inout Outgoing, answeredThrough continuation: UnsafeContinuation<Answer, any Error>) {
        pending.withLock { $0[out.id] = continuation }
        let rc = send(out.frame)
        out.scratch.give(&out.frame)
        // The memfds made here are the worker's to pass on once `send` returns.
        withExtendedLifetime(out.made) {}
        if rc != 0 {
            if let c = pending.withLock({ $0.removeValue(forKey: out.id) }) {
                c.resume(throwing: out.attachedBytes.map { Attached.sendFailure(rc, count: $0) }
                    ?? PluginError(.unavailable, "cannot reach the supervisor: \(String(cString: strerror(-rc)))"))
            }
        }
    }

    /// A request's frame, ready to send, and what goes with it.
    private struct Outgoing {
        var id: UInt64
        var frame: [UInt8]
        /// Where the frame's storage goes back once sent.
        var scratch: ScratchFrame
        /// The memfds of attached bytes, kept until the frame is sent.
        var made: [Bytes.Owned]
        /// The attached bytes' total length (nil: none attached).
        var attachedBytes: Int?
    }

    /// Builds a request's frame (not async: nothing of it stays in the task's frames).
    @inline(never)
    private func prepare(kind: MessageKind, target: String?, method: String?, uri: String?, hasParams: Bool,
                         params: (inout [UInt8]) throws -> [Bytes]) throws -> Outgoing {
        let id = nextID.add(1, ordering: .relaxed).newValue
        // Built in the thread's reusable buffer, as replies are: `send` copies the frame, and the
        // buffer is given back before this task suspends (the continuation's body runs at once, on
        // this thread).
        let scratch = ScratchFrame.current
        var b = FrameBuilder(kind: kind, into: scratch.take())
        b.uint("id", id)
        if let target { b.string("target", target) }
        if let method { b.string("method", method) }
        var attachments: [Bytes] = []
        if hasParams { try b.value("params") { attachments = try params(&$0) } }
        if let uri { b.string("uri", uri) }
        if let trace = Self.taskTraceparent { trace.withJSON { b.raw("traceparent", $0) } }
        var made: [Bytes.Owned] = []
        var frame: [UInt8]
        if attachments.isEmpty {
            frame = b.finish()
        } else {
            let (tail, memfds) = try Attached.write(attachments, to: &b)
            made = memfds
            frame = tail.withUnsafeBytes { b.finish(tail: $0) }
        }
        // The encoder shares the frame's storage until it goes: gone now, so the buffer given back
        // once the frame is sent is the thread's alone.
        _ = consume b
        return Outgoing(id: id, frame: frame, scratch: scratch, made: made,
                        attachedBytes: attachments.isEmpty ? nil : attachments.reduce(0) { $0 + $1.count })
    }

    /// Calls the stream method `method` of `target`: its chunks arrive in the receiver returned.
    /// `input`, when given, sends the call's input as the callee grants room for it.
    func requestStream(target: String, method: String, params: Result<[UInt8], any Error>,
                       input: (@Sendable (StreamSender) async throws -> Void)?) -> ChunkReceiver {
        let id = nextID.add(1, ordering: .relaxed).newValue
        // Strong (not weak: see handleCall's stream case); a stream's entries go when it ends.
        let receiver = ChunkReceiver(grant: { [self] n in
            _ = send(StreamFrames.credit(id: id, n: UInt64(n), into: [UInt8]()))
        }, giveUp: { [self] in giveUpStream(id) })
        let encoded: [UInt8]
        switch params {
        case .failure(let error):
            receiver.finish(.failure(error))
            return receiver
        case .success(let json): encoded = json
        }
        var b = FrameBuilder(kind: .call)
        b.uint("id", id)
        b.string("target", target)
        b.string("method", method)
        b.raw("params", encoded)
        b.flag("stream")
        if input != nil { b.flag("input") }
        if let trace = Self.taskTraceparent { trace.withJSON { b.raw("traceparent", $0) } }
        let feeder = input.map { _ in StreamSender(id: id, input: true, runtime: self) }
        streams.withLock { s in
            s.awaiting[id] = receiver
            if let feeder { s.feeding[id] = (feeder, nil) }
        }
        let rc = send(b.finish())
        if rc != 0 {
            _ = streams.withLock { s in (s.awaiting.removeValue(forKey: id), s.feeding.removeValue(forKey: id)) }
            receiver.finish(.failure(PluginError(.unavailable, "cannot reach the supervisor: \(String(cString: strerror(-rc)))")))
            return receiver
        }
        if let input, let feeder {
            let task = Task { [self] in
                do {
                    try await input(feeder)
                    feeder.end()
                } catch is CancellationError {
                    // The call ended (or was given up) first.
                } catch {
                    // The input itself failed: the call is given up, with the input's error.
                    giveUpStream(id)
                    receiver.finish(.failure(error))
                }
            }
            streams.withLock { s in
                if s.feeding[id] != nil { s.feeding[id]?.task = task } else { task.cancel() }
            }
        }
        return receiver
    }

    /// This plugin stops reading one of its streams before the end: the call is cancelled.
    private func giveUpStream(_ id: UInt64) {
        let (receiver, feeder) = streams.withLock { s in (s.awaiting.removeValue(forKey: id), s.feeding.removeValue(forKey: id)) }
        feeder?.task?.cancel()
        feeder?.sender.gate.fail(CancellationError())
        guard receiver != nil else { return }
        var cancel = FrameBuilder(kind: .cancel)
        cancel.uint("id", id)
        _ = send(cancel.finish())
    }

    func reply(_ id: UInt64, result: [UInt8]) {
        var b = FrameBuilder(kind: .reply, capacity: result.count + 32)
        b.uint("id", id)
        b.raw("result", result)
        _ = send(b.finish())
    }

    /// Answers call `id` with the result `write` appends, in this thread's reusable frame buffer
    /// (no allocation once it has grown); what `write` throws is the answer instead.
    func replyWriting(_ id: UInt64, _ write: (inout [UInt8]) throws -> Void) {
        let scratch = ScratchFrame.current
        var b = FrameBuilder(kind: .reply, into: scratch.take())
        b.uint("id", id)
        do {
            try b.value("result", write)
        } catch {
            return reply(id, error: error)
        }
        var frame = b.finish()
        _ = send(frame)
        scratch.give(&frame)
    }

    func reply(_ id: UInt64, error: any Error) {
        var b = FrameBuilder(kind: .reply)
        b.uint("id", id)
        if let e = error as? PluginError {
            b.error(code: e.code, e.message)
        } else {
            b.error(.pluginError, String(describing: error))
        }
        _ = send(b.finish())
    }

    func log(_ level: LogLevel, _ message: String, metadata: [String: String]? = nil) {
        guard let frame = try? ProtocolJSON.frame(LogMessage(level: level.rawValue, message: message, metadata: metadata)) else { return }
        _ = send(frame)
    }

    /// Sends a whole frame (the host takes the body without its length prefix).
    func send(_ frame: [UInt8]) -> Int32 {
        frame.withUnsafeBufferPointer { p in
            host.pointee.send(host.pointee.ctx, p.baseAddress! + Frame.headerSize, p.count - Frame.headerSize)
        }
    }

    func fileExists(_ path: String) -> Bool { access(path, F_OK) == 0 }

    func shutdown() {
        events.finish()
        callTasks.close()
        inlineCallTasks.close()
        let waiting = pending.withLock { table in
            defer { table.removeAll() }
            return Array(table.values)
        }
        for c in waiting { c.resume(throwing: PluginError(.unavailable, "the plugin is shutting down")) }
        let awaiting = streams.withLock { s in
            defer { s.awaiting.removeAll() }
            return Array(s.awaiting.values)
        }
        for receiver in awaiting { receiver.finish(.failure(PluginError(.unavailable, "the plugin is shutting down"))) }
    }
}
