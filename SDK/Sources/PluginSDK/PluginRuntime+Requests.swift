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

/// This plugin's own calls and opens: a frame built in the thread's reusable buffer, sent, and the
/// task resumed by the reply that matches its id.
extension PluginRuntime {
    /// An answer to one of this plugin's calls: its result and the bytes it brought.
    struct Answer: Sendable {
        /// Its result's JSON, copied out of the reply (inline when small).
        var result: SmallBytes?
        var attachments: [Bytes]?
    }

    /// A reply from the supervisor: to one of this plugin's calls (its task goes on), else the end
    /// of one of its stream calls.
    func replyArrived(_ env: Envelope, _ bytes: UnsafeRawBufferPointer) {
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
    }

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
}
