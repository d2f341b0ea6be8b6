/// The reading end of one stream (SPEC §13): chunks as they arrive (from whatever thread reads the
/// connection) wait here for one consumer, and credit goes back as the consumer takes them
/// (`StreamFrames.grantEvery` at a time), so at most `StreamFrames.initialCredit` chunks are ever
/// buffered: a slow consumer slows the producer instead of growing this end's memory. Used by the
/// SDK's `context.stream`, `SupervisorClient` and `PluginHost` alike.
public final class ChunkReceiver: Sendable {
    private struct State {
        var chunks: [[UInt8]] = []
        var head = 0
        /// How the stream ended (the call's final reply), once it has.
        var end: Result<Void, any Error>?
        var waiter: CheckedContinuation<[UInt8]?, any Error>?
        /// Chunks taken since credit was last granted.
        var taken = 0
        /// Chunks the producer may still send, as this end counts.
        var credit = StreamFrames.initialCredit
        /// The consumer stopped: nothing more is kept.
        var closed = false

        var isEmpty: Bool { head == chunks.count }

        /// Takes the next chunk; the credit to grant for it (0 or `grantEvery`).
        mutating func take() -> ([UInt8], Int) {
            let chunk = chunks[head]
            chunks[head] = []
            head += 1
            if head == chunks.count {
                chunks.removeAll(keepingCapacity: true)
                head = 0
            }
            taken += 1
            guard taken >= StreamFrames.grantEvery else { return (chunk, 0) }
            taken = 0
            credit += StreamFrames.grantEvery
            return (chunk, StreamFrames.grantEvery)
        }
    }

    private let state = Guarded(State())
    private let grant: @Sendable (Int) -> Void
    private let giveUp: @Sendable () -> Void

    /// `grant(n)` sends credit for `n` more chunks; `giveUp()` cancels the call (the consumer
    /// stopped before the end). Either may be called on any thread, never with a lock held.
    public init(grant: @escaping @Sendable (Int) -> Void, giveUp: @escaping @Sendable () -> Void) {
        self.grant = grant
        self.giveUp = giveUp
    }

    /// What became of a chunk handed to `received`.
    public enum Arrival: Equatable, Sendable {
        case kept
        /// The stream had ended or its consumer had stopped: dropped.
        case dropped
        /// The producer sent more than its credit: a protocol violation of the sender's.
        case overCredit
    }

    /// A chunk's `data` arrived.
    @discardableResult
    public func received(_ data: [UInt8]) -> Arrival {
        let (arrival, handed) = state.withLock { s -> (Arrival, (CheckedContinuation<[UInt8]?, any Error>, [UInt8], Int)?) in
            guard s.end == nil, !s.closed else { return (.dropped, nil) }
            guard s.credit > 0 else { return (.overCredit, nil) }
            s.credit -= 1
            s.chunks.append(data)
            guard let waiter = s.waiter else { return (.kept, nil) }
            s.waiter = nil
            let (chunk, n) = s.take()
            return (.kept, (waiter, chunk, n))
        }
        if let (waiter, chunk, n) = handed {
            if n > 0 { grant(n) }
            waiter.resume(returning: chunk)
        }
        return arrival
    }

    /// The stream ended: its final reply came (`.success`), or its error. Chunks still buffered are
    /// read before the end is seen.
    public func finish(_ end: Result<Void, any Error>) {
        let waiter = state.withLock { s -> CheckedContinuation<[UInt8]?, any Error>? in
            guard s.end == nil else { return nil }
            s.end = end
            defer { s.waiter = nil }
            return s.waiter
        }
        waiter?.resume(with: end.map { nil })
    }

    /// The next chunk's data; nil at the end. Throws the stream's error, or `CancellationError`
    /// when the task is cancelled (the call is cancelled with it).
    public func next() async throws -> [UInt8]? {
        try await withTaskCancellationHandler {
            try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<[UInt8]?, any Error>) in
                let (now, n) = state.withLock { s -> (Result<[UInt8]?, any Error>?, Int) in
                    if s.closed { return (.failure(CancellationError()), 0) }
                    if !s.isEmpty {
                        let (chunk, n) = s.take()
                        return (.success(chunk), n)
                    }
                    if let end = s.end { return (end.map { nil }, 0) }
                    s.waiter = continuation
                    return (nil, 0)
                }
                if n > 0 { grant(n) }
                if let now { continuation.resume(with: now) }
            }
        } onCancel: {
            close()
        }
    }

    /// The consumer stops: a stream not yet ended is cancelled (`giveUp`), what was buffered is
    /// dropped, and a waiting `next` throws `CancellationError`.
    public func close() {
        let (waiter, open) = state.withLock { s -> (CheckedContinuation<[UInt8]?, any Error>?, Bool) in
            guard !s.closed else { return (nil, false) }
            s.closed = true
            s.chunks = []
            s.head = 0
            defer { s.waiter = nil }
            return (s.waiter, s.end == nil)
        }
        waiter?.resume(throwing: CancellationError())
        if open { giveUp() }
    }
}

/// The answer of a call made with a stream (SPEC §13): its chunks, decoded, in order; it ends with
/// the call's final reply, or throws its error (`unavailable` when the producer died, `timeout`
/// when nothing came for the idle timeout). Dropping the sequence and its iterators before the
/// end, or cancelling the task that reads it, cancels the call at the producer.
public struct PluginStream<Element: Sendable>: AsyncSequence, Sendable {
    public typealias Failure = any Error
    private let owner: Owner
    private let decode: @Sendable ([UInt8]) throws -> Element

    public init(_ receiver: ChunkReceiver, decode: @escaping @Sendable ([UInt8]) throws -> Element) {
        owner = Owner(receiver)
        self.decode = decode
    }

    public func makeAsyncIterator() -> Iterator { Iterator(owner: owner, decode: decode) }

    public struct Iterator: AsyncIteratorProtocol {
        let owner: Owner
        let decode: @Sendable ([UInt8]) throws -> Element

        public mutating func next() async throws -> Element? {
            guard let raw = try await owner.receiver.next() else { return nil }
            do {
                return try decode(raw)
            } catch {
                owner.receiver.close()
                throw error
            }
        }
    }

    /// Closes the receiver when the last sequence or iterator holding it goes.
    final class Owner: Sendable {
        let receiver: ChunkReceiver
        init(_ receiver: ChunkReceiver) { self.receiver = receiver }
        deinit { receiver.close() }
    }
}

/// The sending end's credit (SPEC §13): `take()` waits until the reader has granted room for one
/// more chunk, so a producer never runs ahead of its reader by more than the window.
public final class CreditGate: Sendable {
    private struct State {
        var credit: Int
        var waiter: CheckedContinuation<Void, any Error>?
        var failure: (any Error)?
    }

    private let state: Guarded<State>

    /// `initial`: the credit it starts with: `StreamFrames.initialCredit` for an answer, 0 for a
    /// call's input (its reader grants the first window when it starts reading).
    public init(initial: Int = StreamFrames.initialCredit) {
        state = Guarded(State(credit: initial))
    }

    /// Waits for one chunk's credit and takes it. Throws the stream's end (`fail`), or
    /// `CancellationError` when the task is cancelled.
    public func take() async throws {
        try await withTaskCancellationHandler {
            try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<Void, any Error>) in
                let now = state.withLock { s -> Result<Void, any Error>? in
                    if let failure = s.failure { return .failure(failure) }
                    if s.credit > 0 {
                        s.credit -= 1
                        return .success(())
                    }
                    s.waiter = continuation
                    return nil
                }
                if let now { continuation.resume(with: now) }
            }
        } onCancel: {
            fail(CancellationError())
        }
    }

    /// The reader grants `n` more chunks. False when that is more than `StreamFrames.largestCredit`
    /// (the reader's protocol violation; the credit is not added).
    @discardableResult
    public func grant(_ n: UInt64) -> Bool {
        let (waiter, ok) = state.withLock { s -> (CheckedContinuation<Void, any Error>?, Bool) in
            guard StreamFrames.creditFits(s.credit, n) else { return (nil, false) }
            s.credit += Int(n)
            guard let waiter = s.waiter, s.credit > 0 else { return (nil, true) }
            s.waiter = nil
            s.credit -= 1
            return (waiter, true)
        }
        waiter?.resume()
        return ok
    }

    /// The stream is over (cancelled, its reader gone): a waiting `take` and every later one throw `error`.
    public func fail(_ error: any Error) {
        let waiter = state.withLock { s -> CheckedContinuation<Void, any Error>? in
            if s.failure == nil { s.failure = error }
            defer { s.waiter = nil }
            return s.waiter
        }
        waiter?.resume(throwing: error)
    }
}
