#if canImport(Glibc)
import Glibc
#endif
import LinuxSupport
import PluginProtocol
import Protocol
import SupervisorClient
import SupervisorKit

/// Calls answered with a stream (SPEC §13) from the program the supervisor runs in: the chunks come
/// from the event loop into the stream's `ChunkReceiver` (at most its window), and credit goes back
/// to the loop as the program reads them.
extension PluginHost {
    /// Calls the stream method `method` of `target` (`PluginCaller.startStream`): submitted to the
    /// loop now; a plugin that is starting or restarting is waited for, as for `call`.
    public func startStream(_ target: String, _ method: String, params json: [UInt8]?, input: HostCoding.InputFeed?,
                            timeout: Duration?) -> ChunkReceiver {
        let supervisor = self.supervisor
        let call = HostStreamCall(supervisor)
        let receiver = ChunkReceiver(grant: { n in call.send(StreamFrames.credit(id: 0, n: UInt64(n), into: [UInt8]())) },
                                     giveUp: { call.giveUp() })
        if isIdle {
            receiver.finish(.failure(Self.notRunning))
            return receiver
        }
        // SPEC §13: the first 16 chunks of an input may go before any grant (the supervisor holds what
        // the plugin has no room for yet); the plugin's grants add to them.
        let gate = input.map { _ in CreditGate(initial: StreamFrames.initialCredit) }
        var frame = Self.callFrame(target, method, params: json, timeout: timeout)
        frame.flag("stream")
        if input != nil { frame.flag("input") }
        let handlers = Supervisor.HostStreamHandlers(chunk: { receiver.received($0) }, inputCredit: { gate?.grant($0) })
        let ticket = supervisor.submit(frame.finish(), stream: handlers) { result in
            gate?.fail(CancellationError())
            receiver.finish(result.map { _ in () }.mapError { $0 as any Error })
            // The request keeps its handlers (which hold the receiver) and the receiver holds
            // this call: the call lets go of the request, or the three would keep one another.
            call.ended()
        }
        call.submitted(ticket)
        if let input, let gate {
            Task {
                let seq = Guarded<UInt64>(0)
                do {
                    try await input { data in
                        try await gate.take()
                        seq.withLock { next in
                            call.send(data.withUnsafeBytes { StreamFrames.chunk(id: 0, seq: next, data: $0, input: true, into: [UInt8]()) })
                            next += 1
                        }
                    }
                    seq.withLock { call.send(StreamFrames.inputEnd(id: 0, count: $0, into: [UInt8]())) }
                } catch is CancellationError {
                    // The call ended, or was given up, first.
                } catch {
                    call.giveUp()
                    receiver.finish(.failure(error))
                }
            }
        }
        return receiver
    }
}

/// One stream call's way back to the loop: credit and input frames made before the ticket exists
/// (a chunk can be read on the loop before `submit` returns) are sent once it does; after the call
/// has ended (`ended`), none is.
final class HostStreamCall: Sendable {
    private let supervisor: Supervisor
    private let state = Guarded<(ticket: Supervisor.HostTicket?, owed: [[UInt8]], gaveUp: Bool, ended: Bool)>((nil, [], false, false))

    init(_ supervisor: Supervisor) {
        self.supervisor = supervisor
    }

    func submitted(_ ticket: Supervisor.HostTicket) {
        let (owed, gaveUp) = state.withLock { s in
            guard !s.ended else { return ([[UInt8]](), false) }
            s.ticket = ticket
            defer { s.owed = [] }
            return (s.owed, s.gaveUp)
        }
        for frame in owed { supervisor.streamFrame(ticket, frame) }
        if gaveUp { supervisor.cancel(ticket, with: ErrorBody(.unavailable, "the stream's reader stopped")) }
    }

    /// The call is settled: it holds its request no longer.
    func ended() {
        state.withLock { s in
            s.ended = true
            s.ticket = nil
            s.owed = []
        }
    }

    func send(_ frame: [UInt8]) {
        guard let ticket = state.withLock({ s -> Supervisor.HostTicket? in
            if s.ticket == nil, !s.ended { s.owed.append(frame) }
            return s.ticket
        }) else { return }
        supervisor.streamFrame(ticket, frame)
    }

    func giveUp() {
        guard let ticket = state.withLock({ s -> Supervisor.HostTicket? in
            if s.ticket == nil, !s.ended { s.gaveUp = true }
            return s.ticket
        }) else { return }
        supervisor.cancel(ticket, with: ErrorBody(.unavailable, "the stream's reader stopped"))
    }
}

extension PluginHost {
    /// Calls `method` of `target`, which answers with raw bytes (SPEC §13, as
    /// `SupervisorClient.callBytes`): inline ones as an array, larger ones as the plugin's sealed
    /// memfd itself, handed over in this process (the caller owns it). Through the loop: a direct
    /// link carries no descriptors.
    public func callBytes<P: Encodable>(_ target: String, _ method: String, _ params: P, timeout: Duration? = nil) async throws -> AttachedBytes {
        let json = try HostCoding.encode(params, for: "\(target).\(method)")
        var frame = Self.callFrame(target, method, params: json, timeout: timeout)
        let received = Guarded<Supervisor.HostBytes?>(nil)
        let result: [UInt8]
        do {
            result = try await request(frame.finish(), bytes: { bytes in received.withLock { $0 = bytes } })
        } catch {
            for fd in received.withLock({ $0 })?.descriptors ?? [] { close(fd) }
            throw error
        }
        var attached: [AttachedBytes] = []
        if let bytes = received.withLock({ $0 }) {
            var inline = bytes.inline[...]
            var fds = bytes.descriptors[...]
            for a in bytes.attachments {
                if a.isInline {
                    attached.append(.inline(Array(inline.prefix(a.length))))
                    inline = inline.dropFirst(a.length)
                } else if let fd = fds.popFirst() {
                    attached.append(.descriptor(fd, length: a.length))
                }
            }
        }
        return try AttachedBytes.pick(attached, for: result, of: "\(target).\(method)")
    }

    /// Calls `method` of `target` with raw bytes (SPEC §13, as `SupervisorClient.callJSON(_:_:params:sending:)`):
    /// `params` name them `{"$bytes": i}`; inline ones travel in the request, memfds are handed over
    /// in this process (the supervisor takes its own copy: they stay the caller's). Through the
    /// loop: a direct link carries no descriptors.
    public func callJSON(_ target: String, _ method: String, params: [UInt8]?, sending: [AttachedBytes], timeout: Duration? = nil) async throws -> [UInt8] {
        var frame = Self.callFrame(target, method, params: params, timeout: timeout)
        var tail: [UInt8] = []
        frame.attachments(sending.map { bytes in
            switch bytes {
            case .inline(let array):
                tail.append(contentsOf: array)
                return Attachment(length: array.count, place: .inline)
            case .descriptor(let fd, let length):
                return Attachment(length: length, place: .descriptor(fd))
            }
        })
        return try await request(tail.withUnsafeBytes { frame.finish(tail: $0) })
    }
}
