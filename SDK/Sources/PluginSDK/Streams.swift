import PluginProtocol
#if canImport(Glibc)
import Glibc
#endif

/// Where a stream method (`PluginAPI.stream`) sends the elements of its answer (SPEC §13). `send`
/// waits while the reader has no room (its credit is used up), so a method can produce as fast as
/// it likes and never runs ahead of its reader; it throws `CancellationError` once the call is
/// cancelled (the caller gave up, or the stream's idle or whole-call timeout passed).
public struct StreamOutput<Element: MethodResult>: Sendable {
    let sender: StreamSender

    /// Sends one element, once the reader has room for it. An element of `Bytes` (at most 64
    /// KiB) travels as raw bytes in its chunk, with no JSON around it.
    public func send(_ value: Element) async throws {
        if let bytes = value as? Bytes { return try await sender.send(bytes) }
        try await sender.send(try Coding.encode(value))
    }
}

/// The elements of a call's input stream (SPEC §13), as the caller sends them; it ends when the
/// caller ends its input. Reading slowly slows the caller.
public typealias StreamInput<Element: Sendable> = PluginStream<Element>

/// The sending end of one stream: an answer's (the non-generic core of `StreamOutput`) or, with
/// `input`, the input of a call this plugin makes. Chunks go out as the reader grants room.
final class StreamSender: Sendable {
    let id: UInt64
    let input: Bool
    let gate: CreditGate
    private let runtime: PluginRuntime
    /// The next `seq`, taken and sent under one lock so concurrent senders' chunks go out in the
    /// order of their `seq`.
    private let seq = Guarded<UInt64>(0)

    /// An input sends nothing before the callee grants its first window.
    init(id: UInt64, input: Bool = false, runtime: PluginRuntime) {
        self.id = id
        self.input = input
        self.runtime = runtime
        gate = CreditGate(initial: input ? 0 : StreamFrames.initialCredit)
    }

    /// Sends one element whose `data` is `json`.
    func send(_ json: [UInt8]) async throws {
        try await send(json, isBytes: false)
    }

    /// Sends `bytes` as one element of raw bytes, inline in its chunk.
    func send(_ bytes: Bytes) async throws {
        guard bytes.count <= Attachments.inlineLimit else {
            throw PluginError(.badRequest, "a stream's element of bytes is at most \(Attachments.inlineLimit >> 10) KiB (this one is \(bytes.count) bytes): send it in pieces")
        }
        try await send(try bytes.array(), isBytes: true)
    }

    /// Once the reader has room: the next chunk, numbered under the lock it is sent under.
    private func send(_ element: [UInt8], isBytes: Bool) async throws {
        try await gate.take()
        let rc = element.withUnsafeBytes { raw in
            seq.withLock { next -> Int32 in
                defer { next += 1 }
                return runtime.send(isBytes ? StreamFrames.bytesChunk(id: id, seq: next, bytes: raw, input: input, into: [UInt8]())
                                            : StreamFrames.chunk(id: id, seq: next, data: raw, input: input, into: [UInt8]()))
            }
        }
        if rc != 0 { throw PluginError(.unavailable, "cannot reach the supervisor: \(String(cString: strerror(-rc)))") }
    }

    /// The input is complete.
    func end() {
        seq.withLock { count in _ = runtime.send(StreamFrames.inputEnd(id: id, count: count, into: [UInt8]())) }
    }
}

extension PluginAPI {
    /// Exports `name` answering with a stream: `body` sends the answer's elements with
    /// `out.send(_:)` (each waits while the reader has no room) and returns when the stream is
    /// complete; what it throws ends the stream with that error. Called with `"stream": true`
    /// (`supervisor call --stream`, the host libraries' `stream`, `context.stream`); an ordinary
    /// call of it is refused with `badRequest`.
    public func stream<Params: MethodParameters, Element: MethodResult>(
        _ name: String, _ body: @escaping @Sendable (Params, StreamOutput<Element>) async throws -> Void
    ) {
        register(name, .stream { raw, _, sender in
            let params = try raw.withUnsafeBytesOrNil { try Coding.decode(Params.self, $0) }
            try await body(params, StreamOutput(sender: sender))
        })
    }

    /// Exports `name` taking a stream of input as well (the caller's `input:`), and answering with one.
    public func stream<Params: MethodParameters, Input: MethodParameters & Sendable, Element: MethodResult>(
        _ name: String, input: Input.Type, _ body: @escaping @Sendable (Params, StreamInput<Input>, StreamOutput<Element>) async throws -> Void
    ) {
        register(name, .stream { raw, receiver, sender in
            let params = try raw.withUnsafeBytesOrNil { try Coding.decode(Params.self, $0) }
            let input = PluginStream(receiver) { try Coding.streamElement(Input.self, $0, of: "\(name)'s input") }
            try await body(params, input, StreamOutput(sender: sender))
        })
    }
}

extension PluginContext {
    /// Calls the stream method `method` of plugin `target` (a dependency): its elements as they
    /// come, decoded as `Element`. Reading slowly slows the producer; leaving the loop early (or
    /// cancelling the task) cancels the call.
    public func stream<Params: Encodable, Element: Decodable & Sendable>(
        _ target: String, _ method: String, _ params: Params, as: Element.Type = Element.self
    ) -> PluginStream<Element> {
        let what = "\(target).\(method)"
        return PluginStream(runtime.requestStream(target: target, method: method, params: Result { try Coding.encode(params) }, input: nil)) {
            try Coding.streamElement(Element.self, $0, of: what)
        }
    }

    /// Calls the stream method `method` of plugin `target` with a stream of `input` elements, sent
    /// as the callee reads them.
    public func stream<Params: Encodable, Input: AsyncSequence & Sendable, Element: Decodable & Sendable>(
        _ target: String, _ method: String, _ params: Params, input: Input, as: Element.Type = Element.self
    ) -> PluginStream<Element> where Input.Element: Encodable {
        let what = "\(target).\(method)"
        let send: @Sendable (StreamSender) async throws -> Void = { sender in
            for try await element in input {
                if let bytes = element as? Bytes { try await sender.send(bytes) } else { try await sender.send(try Coding.encode(element)) }
            }
        }
        return PluginStream(runtime.requestStream(target: target, method: method, params: Result { try Coding.encode(params) }, input: send)) {
            try Coding.streamElement(Element.self, $0, of: what)
        }
    }
}
