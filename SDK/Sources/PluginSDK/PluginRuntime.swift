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
    let nextID = Atomic<UInt64>(1)
    let pending = Guarded<[UInt64: UnsafeContinuation<Answer, any Error>]>([:])
    /// The calls whose async handler runs, by id: what a `cancel` reaches.
    let running = Guarded<[UInt64: Running]>([:])
    /// How many calls' async handlers run now.
    var runningCalls: Int { running.withLock { $0.count } }
    /// Tasks kept for async methods' calls (`CallTask`): those on Swift's global executor, and
    /// those that run inline methods on the delivering threads (`DeliveryExecutor`).
    let callTasks = CallTaskPool(limit: 64)
    let inlineCallTasks = CallTaskPool(limit: 64)
    /// How many kept tasks exist (waiting or running a call): one that ends has settled its last
    /// call, so a test can wait for it rather than for time to pass.
    let keptTasks = Atomic<Int>(0)
    var keptTaskCount: Int { keptTasks.load(ordering: .acquiring) }
    /// The streams in flight (SPEC §13), both ways.
    let streams = Guarded(StreamTables())
    let events: AsyncStream<EventWork>.Continuation
    /// The plugin's `startup` while it runs: a `willTerminate` cancels it (the plugin is being
    /// stopped; its stop should not wait for a start nobody needs any more).
    let starting = Guarded<(task: Task<Void, any Error>?, stopping: Bool)>((nil, false))

    /// The `traceparent` of the call or open an async handler is handling (SPEC §3): a call this
    /// plugin makes while handling it carries it on, so the trace follows the request through every
    /// plugin it touches.
    @TaskLocal static var taskTraceparent: CarriedTrace?

    /// The bytes attached to the message being decoded (`Bytes.init(from:)`): a call's, while its
    /// handler runs; an answer's, while it is decoded.
    @TaskLocal static var attachments: [Bytes]?

    /// A sync handler runs on the worker's I/O thread while the message's bytes are valid: its
    /// traceparent is those bytes, found through a thread-specific pointer and decoded only if the
    /// plugin asks (no string, no task-local binding on the fastest calls).
    static let syncTraceKey: pthread_key_t = {
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

    init(plugin: any Pluggable, host: UnsafePointer<sp_host>) {
        self.plugin = plugin
        self.host = host
        let (stream, continuation) = AsyncStream<EventWork>.makeStream()
        self.events = continuation
        plugin.exports(api)
        // Its methods that may run twice, for the worker's `hello` (SPEC §15): while it is created.
        let idempotent = api.idempotentNames
        if !idempotent.isEmpty {
            var declaration = FrameBuilder(kind: .idempotent)
            declaration.strings("methods", idempotent)
            _ = send(declaration.finish())
        }
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
        case .event: eventArrived(env, bytes)
        case .reply: replyArrived(env, bytes)
        case .cancel:
            guard let id = env.id else { return }
            running.withLock { $0.removeValue(forKey: id) }?.cancel()
        case .chunk: chunkArrived(env, bytes)
        case .credit: creditArrived(env)
        default:
            break
        }
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
