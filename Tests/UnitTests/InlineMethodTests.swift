import CPluginABI
import Foundation
import PluginProtocol
@testable import PluginSDK
import Synchronization
import Testing

/// `execution: .inline` (DeliveryExecutor): a method runs on the thread that delivered its call and
/// resumes on the thread that delivered the reply it awaited, before `receive` returns there; a
/// `.task` method does neither. Driven through a PluginRuntime with a host that records what is
/// sent and on which thread, two "worker" threads delivering one at a time as the ABI promises.
/// Under the thread sanitizer (`scripts/test.sh --tsan`) this is also the executor's race check.
@Suite(.serialized) struct InlineMethodTests {  // serialized: both use the one DeliveryExecutor
    /// What the plugin sent, and whether the thread delivering at that moment was the sender.
    final class Wire: @unchecked Sendable {
        // @unchecked: every field is behind `lock`.
        struct Sent { var frame: [UInt8]; var byDeliverer: Bool }
        private let lock = NSLock()
        private var sent: [Sent] = []
        private var deliverer: pthread_t?
        /// Deliveries are serialised, as the worker's `pluginLock` does.
        private let deliveryLock = NSLock()

        func record(_ frame: [UInt8]) {
            lock.lock(); defer { lock.unlock() }
            sent.append(Sent(frame: frame, byDeliverer: deliverer.map { pthread_equal($0, pthread_self()) != 0 } ?? false))
        }

        func deliver(_ runtime: PluginRuntime, _ json: String) {
            deliveryLock.lock(); defer { deliveryLock.unlock() }
            lock.lock(); deliverer = pthread_self(); lock.unlock()
            Array(json.utf8).withUnsafeBytes { runtime.receive($0) }
            lock.lock(); deliverer = nil; lock.unlock()
        }

        var frames: [Sent] { lock.lock(); defer { lock.unlock() }; return sent }

        /// A runtime for `plugin` whose host records what it sends here.
        func runtime(_ plugin: any Pluggable) -> PluginRuntime {
            let host = UnsafeMutablePointer<sp_host>.allocate(capacity: 1)  // lives as long as the test process
            host.initialize(to: sp_host(abi_version: UInt32(SP_ABI_VERSION), ctx: Unmanaged.passRetained(self).toOpaque(), send: { ctx, bytes, count in
                Unmanaged<Wire>.fromOpaque(ctx!).takeUnretainedValue().record(Array(UnsafeBufferPointer(start: bytes, count: count)))
                return 0
            }))
            return PluginRuntime(plugin: plugin, host: host)
        }

        /// Waits (up to 10 s) until a frame matching `match` was sent; returns it.
        func wait(_ what: String, _ match: (Envelope, UnsafeRawBufferPointer) -> Bool) throws -> (Sent, Envelope) {
            let deadline = Date().addingTimeInterval(10)
            while Date() < deadline {
                for s in frames {
                    if let env = s.frame.withUnsafeBytes({ raw in (try? Envelope.parse(raw)).flatMap { match($0, raw) ? $0 : nil } }) { return (s, env) }
                }
                usleep(1000)
            }
            throw HarnessFailure("no \(what) was sent")
        }
    }

    struct HarnessFailure: Error, CustomStringConvertible { var description: String; init(_ d: String) { description = d } }

    /// Runs `body` on a thread of its own and waits for it: these tests deliver and wait on their
    /// own thread, as the worker's I/O thread does, and must not hold one of the few threads of
    /// Swift's global executor (two on a 2-core machine), which the runtime's tasks need meanwhile.
    static func onOwnThread(_ body: @escaping @Sendable () throws -> Void) async throws {
        try await withCheckedThrowingContinuation { (done: CheckedContinuation<Void, any Error>) in
            let thread = Thread {
                do { try body(); done.resume() } catch { done.resume(throwing: error) }
            }
            thread.stackSize = 1 << 20
            thread.start()
        }
    }

    final class Relay: Pluggable {
        private let context = Mutex<PluginContext?>(nil)
        init() {}
        func startup(_ context: PluginContext) async throws { self.context.withLock { $0 = context } }
        private func ctx() throws -> PluginContext {
            guard let c = context.withLock({ $0 }) else { throw PluginError(.unavailable, "not started") }
            return c
        }
        func exports(_ api: PluginAPI) {
            api.method("inline", execution: .inline) { (n: Int) async throws -> Int in
                try await self.ctx().call("b", "ping", n, as: Int.self) + 1
            }
            api.method("task") { (n: Int) async throws -> Int in
                try await self.ctx().call("b", "ping", n, as: Int.self) + 1
            }
            // For CallTaskTests: what a call sees of the one before it on a kept task.
            api.method("trace") { () async throws -> String in
                try self.ctx().traceparent ?? "none"
            }
            api.method("cancelled") { () async -> Bool in Task.isCancelled }
        }
    }

    /// A runtime over `wire`, started (its startup answered).
    static func started(_ wire: Wire) throws -> PluginRuntime {
        let runtime = wire.runtime(Relay())
        wire.deliver(runtime, #"{"type":"event","id":1,"name":"startup","payload":{"identifier":"a","version":"1.0.0","dataDirectory":"/tmp","bundleDirectory":"/tmp","dependencies":["b"]}}"#)
        _ = try wire.wait("startup's reply") { env, _ in env.kind == .reply && env.id == 1 }
        return runtime
    }

    /// The outgoing call to b made for the call carrying `n`, and the reply to call `id`.
    static func outgoing(_ wire: Wire, _ n: Int) throws -> (Wire.Sent, Envelope) {
        try wire.wait("the call to b for \(n)") { env, raw in
            env.kind == .call && env.params.map { String(decoding: raw[$0], as: UTF8.self) } == "\(n)"
        }
    }

    func reply(_ wire: Wire, to id: UInt64) throws -> (Wire.Sent, String) {
        let (sent, env) = try wire.wait("the reply to \(id)") { env, _ in env.kind == .reply && env.id == id }
        let result = sent.frame.withUnsafeBytes { raw in env.result.map { String(decoding: raw[$0], as: UTF8.self) } ?? "" }
        return (sent, result)
    }

    @Test("an inline method sends its call on the thread that delivered it and answers on the thread that delivered the reply, each before receive returned; a task's method does neither")
    func inlineRunsOnTheDeliveringThreads() async throws {
        try await Self.onOwnThread { try self.inlineRunsOnTheDeliveringThreadsBody() }
    }

    func inlineRunsOnTheDeliveringThreadsBody() throws {
        let wire = Wire()
        let runtime = try Self.started(wire)
        let links = DispatchQueue(label: "links")

        wire.deliver(runtime, #"{"type":"call","id":10,"method":"inline","params":41}"#)
        let (call, callEnv) = try Self.outgoing(wire, 41)
        #expect(call.byDeliverer, "the inline method's call went out after receive returned, or from another thread")
        links.sync { wire.deliver(runtime, #"{"type":"reply","id":\#(callEnv.id!),"result":41}"#) }
        let (answer, result) = try reply(wire, to: 10)
        #expect(answer.byDeliverer && result == "42", "answered \(result), by the delivering thread: \(answer.byDeliverer)")

        wire.deliver(runtime, #"{"type":"call","id":11,"method":"task","params":7}"#)
        let (taskCall, taskEnv) = try Self.outgoing(wire, 7)
        links.sync { wire.deliver(runtime, #"{"type":"reply","id":\#(taskEnv.id!),"result":7}"#) }
        let (taskAnswer, taskResult) = try reply(wire, to: 11)
        #expect(!taskCall.byDeliverer && !taskAnswer.byDeliverer && taskResult == "8")
    }

    @Test("inline methods that overlap (200 calls, replies delivered on two threads in any order) are each answered once, with their own result, each call sent and answered by the thread that delivered what made it ready")
    func overlappingInlineCalls() async throws {
        try await Self.onOwnThread { try self.overlappingInlineCallsBody() }
    }

    func overlappingInlineCallsBody() throws {
        let wire = Wire()
        let runtime = try Self.started(wire)
        let count = 200
        let io = DispatchQueue(label: "io"), links = DispatchQueue(label: "links")
        let group = DispatchGroup()
        for n in 0..<count {
            io.async(group: group) { wire.deliver(runtime, #"{"type":"call","id":\#(1000 + n),"method":"inline","params":\#(n)}"#) }
        }
        // Each outgoing call is answered from the links thread as soon as it shows.
        var callsByDeliverer = 0
        for n in 0..<count {
            let (sent, env) = try Self.outgoing(wire, n)
            if sent.byDeliverer { callsByDeliverer += 1 }
            links.async(group: group) { wire.deliver(runtime, #"{"type":"reply","id":\#(env.id!),"result":\#(n)}"#) }
        }
        group.wait()
        var answersByDeliverer = 0
        for n in 0..<count {
            let (sent, result) = try reply(wire, to: UInt64(1000 + n))
            #expect(result == "\(n + 1)")
            if sent.byDeliverer { answersByDeliverer += 1 }
        }
        // Overlapping calls run inline too: every piece on the thread that delivered what made it ready.
        #expect(callsByDeliverer == count && answersByDeliverer == count,
                "\(callsByDeliverer) calls and \(answersByDeliverer) answers of \(count) sent by the delivering thread")
        #expect(runtime.inlineCallTasks.waiting > 0 && runtime.callTasks.waiting == 0, "an inline call ran on a task of the global executor")
        let replies = wire.frames.filter { $0.frame.withUnsafeBytes { (try? Envelope.parse($0))?.kind == .reply } }
        #expect(replies.count == count + 1, "\(replies.count) replies for \(count) calls and the startup")
    }
}

/// A `willTerminate` that comes while `startup` still runs cancels it: the stop does not wait for
/// a start nobody needs any more (lifecycle events run one at a time, so it would otherwise wait
/// behind it until the supervisor's grace period killed the worker).
@Suite struct StartupCancelTests {
    final class SlowStart: Pluggable {
        init() {}
        func startup(_ context: PluginContext) async throws {
            try await Task.sleep(nanoseconds: 3_600_000_000_000)
        }
    }

    @Test("willTerminate during startup: startup ends at once with an error saying why, then willTerminate is answered")
    func willTerminateCancelsStartup() async throws {
        try await InlineMethodTests.onOwnThread { try self.willTerminateCancelsStartupBody() }
    }

    func willTerminateCancelsStartupBody() throws {
        let wire = InlineMethodTests.Wire()
        let runtime = wire.runtime(SlowStart())
        wire.deliver(runtime, #"{"type":"event","id":1,"name":"startup","payload":{"identifier":"s","version":"1.0.0","dataDirectory":"/tmp","bundleDirectory":"/tmp"}}"#)
        wire.deliver(runtime, #"{"type":"event","id":2,"name":"willTerminate"}"#)
        let (startup, startupEnv) = try wire.wait("startup's reply") { env, _ in env.kind == .reply && env.id == 1 }
        let error = startup.frame.withUnsafeBytes { raw in startupEnv.error.map { String(decoding: raw[$0], as: UTF8.self) } ?? "" }
        #expect(error.contains("unavailable") && error.contains("startup was cancelled"), "\(error)")
        let (_, terminated) = try wire.wait("willTerminate's reply") { env, _ in env.kind == .reply && env.id == 2 }
        #expect(terminated.error == nil)
    }
}
