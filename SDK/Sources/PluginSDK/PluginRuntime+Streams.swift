import PluginProtocol
import Synchronization
#if canImport(Glibc)
import Glibc
#endif

/// Streams (SPEC §13), both ways: calls to this plugin answered with a stream (and the input that
/// comes with them), and this plugin's own stream calls (and the input it sends with them).
extension PluginRuntime {
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

    /// A call to a stream method: answered with chunks as the caller grants room for them, with
    /// its input (when it comes with one) read as the method takes it.
    func serveStream(_ id: UInt64, _ method: String, _ env: Envelope, _ bytes: UnsafeRawBufferPointer, _ attached: [Bytes]?,
                     _ body: @escaping @Sendable ([UInt8]?, ChunkReceiver, StreamSender) async throws -> Void) {
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

    /// A chunk of one of this plugin's stream calls, or of the input of a call to it.
    func chunkArrived(_ env: Envelope, _ bytes: UnsafeRawBufferPointer) {
        guard let id = env.id else { return }
        // Its element: raw bytes (an element of `Bytes`), or its JSON.
        let data = StreamFrames.element(of: env).map { Array(bytes[$0.range]) } ?? Array("null".utf8)
        if env.input {
            guard let receiver = streams.withLock({ $0.reading[id] }) else { return }
            if env.end { receiver.finish(.success(())) } else { receiver.received(data) }
        } else {
            streams.withLock { $0.awaiting[id] }?.received(data)
        }
    }

    /// Room for more chunks: of a stream this plugin answers with, or of the input it sends.
    func creditArrived(_ env: Envelope) {
        guard let id = env.id, let n = env.n else { return }
        if env.input {
            streams.withLock { $0.feeding[id]?.sender }?.gate.grant(n)
        } else {
            streams.withLock { $0.answering[id] }?.gate.grant(n)
        }
    }

    /// The final reply of one of this plugin's stream calls: its stream ends.
    func streamEnded(_ id: UInt64, _ env: Envelope, _ bytes: UnsafeRawBufferPointer) {
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
}
