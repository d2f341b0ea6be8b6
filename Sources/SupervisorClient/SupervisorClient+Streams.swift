import IPC
import PluginProtocol
import Protocol

/// Calls answered with a stream (SPEC §13), through the supervisor: chunks arrive on the
/// connection's reader thread and wait in the stream's `ChunkReceiver` (at most its window), and
/// credit goes back as the program reads them. Direct links carry no streams.
extension SupervisorClient {
    struct StreamCall {
        /// The connection it went out on, once it did.
        var link: UInt64?
        let receiver: ChunkReceiver
        /// Its input, when it has one: the gate the callee's credit opens, the task sending it.
        var input: CreditGate?
        var feeder: Task<Void, Never>?
    }

    /// Calls the stream method `method` of `target` (`PluginCaller.startStream`): the call goes
    /// out on the connection once there is one; its chunks come on the connection's reader thread.
    public func startStream(_ target: String, _ method: String, params json: [UInt8]?, input: HostCoding.InputFeed?,
                            timeout: Duration?) -> ChunkReceiver {
        let id = takeID()
        let receiver = ChunkReceiver(grant: { [weak self] n in
            self?.sendOnStream(id, StreamFrames.credit(id: id, n: UInt64(n), into: [UInt8]()))
        }, giveUp: { [weak self] in self?.giveUpStream(id) })
        // SPEC §13: the first 16 chunks of an input may go before any grant (the supervisor holds what
        // the plugin has no room for yet); the plugin's grants add to them.
        let gate = input.map { _ in CreditGate(initial: StreamFrames.initialCredit) }
        state.withLock { $0.streamCalls[id] = StreamCall(link: nil, receiver: receiver, input: gate) }
        Task {
            do {
                let link = try await currentLink(waiting: timeout ?? reconnectWait)
                var b = FrameBuilder(kind: .call)
                b.uint("id", id)
                b.string("target", target)
                b.string("method", method)
                if let json { b.raw("params", json) }
                b.flag("stream")
                if input != nil { b.flag("input") }
                if let timeout { b.uint("timeoutMs", HostCoding.milliseconds(timeout)) }
                let live = state.withLock { s -> Bool in
                    guard s.link === link, s.streamCalls[id] != nil else { return false }
                    s.streamCalls[id]?.link = link.number
                    return true
                }
                // Given up before it went out: nothing to cancel.
                guard live else { return receiver.finish(.failure(ErrorBody(.unavailable, Self.connectionLost))) }
                try link.connection.sendFrame(b.finish())
                if let input, let gate { startFeeding(id, input, gate, on: link, receiver) }
            } catch {
                state.withLock { _ = $0.streamCalls.removeValue(forKey: id) }
                receiver.finish(.failure(error))
            }
        }
        return receiver
    }

    /// Sends a call's input as the plugin grants room for it, then its end.
    private func startFeeding(_ id: UInt64, _ input: @escaping HostCoding.InputFeed,
                              _ gate: CreditGate, on link: Link, _ receiver: ChunkReceiver) {
        let seq = Guarded<UInt64>(0)
        let task = Task { [weak self] in
            do {
                try await input { data in
                    try await gate.take()
                    try seq.withLock { next in
                        defer { next += 1 }
                        try link.connection.sendFrame(data.withUnsafeBytes { StreamFrames.chunk(id: id, seq: next, data: $0, input: true, into: [UInt8]()) })
                    }
                }
                try seq.withLock { count in try link.connection.sendFrame(StreamFrames.inputEnd(id: id, count: count, into: [UInt8]())) }
            } catch is CancellationError {
                // The call ended, or was given up, first.
            } catch {
                // The input failed (or the connection did): the call is given up with its error.
                self?.giveUpStream(id)
                receiver.finish(.failure(error))
            }
        }
        state.withLock { s in
            if s.streamCalls[id] != nil { s.streamCalls[id]?.feeder = task } else { task.cancel() }
        }
    }

    /// Sends a frame about stream call `id` on the connection it went out on.
    private func sendOnStream(_ id: UInt64, _ frame: [UInt8]) {
        let link = state.withLock { s -> Link? in
            guard let number = s.streamCalls[id]?.link, let link = s.link, link.number == number else { return nil }
            return link
        }
        try? link?.connection.sendFrame(frame)
    }

    /// The program stops reading stream `id` before its end: the call is cancelled.
    func giveUpStream(_ id: UInt64) {
        let (call, link) = state.withLock { s in (s.streamCalls.removeValue(forKey: id), s.link) }
        guard let call else { return }
        call.feeder?.cancel()
        call.input?.fail(CancellationError())
        if let number = call.link, let link, link.number == number { send(cancelOf: id, on: link) }
    }

    /// A stream frame from the supervisor: a chunk of an answer, credit for an input.
    func streamFrame(_ kind: MessageKind, _ env: Envelope, _ bytes: UnsafeRawBufferPointer) {
        guard let id = env.id, let call = state.withLock({ $0.streamCalls[id] }) else { return }
        if kind == .chunk, !env.input, let (element, _) = StreamFrames.element(of: env) {
            call.receiver.received(Array(bytes[element]))
        } else if kind == .credit, env.input, let n = env.n {
            call.input?.grant(n)
        }
    }

    /// The final reply of stream call `id`, if it is one: its stream ends.
    func streamEnded(_ id: UInt64, _ env: Envelope, _ bytes: UnsafeRawBufferPointer) {
        guard let call = state.withLock({ $0.streamCalls.removeValue(forKey: id) }) else { return }
        call.feeder?.cancel()
        call.input?.fail(CancellationError())
        call.receiver.finish(HostCoding.answer(of: env, in: bytes).map { _ in () }.mapError { $0 as any Error })
    }
}
