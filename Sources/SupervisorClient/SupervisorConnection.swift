import IPC
import LinuxSupport
import PluginProtocol
import Protocol
#if canImport(Glibc)
import Glibc
#endif

/// A blocking connection to a running supervisor's control socket (SPEC §6): one request at a time,
/// answered before the next. The CLI's one-shot commands use it; a program that makes many calls,
/// follows events or provides host methods uses `SupervisorClient`. Links neither SwiftNIO nor the
/// supervisor.
public struct SupervisorConnection {
    /// The control socket this connection reached.
    public let socketPath: String
    let connection: BlockingConnection
    /// What `giveUp` set, if anything.
    private var readLimitMs: UInt64?

    /// What a request can end in, besides a result.
    public enum Failure: Error, CustomStringConvertible {
        /// No supervisor answers at the socket path (the first value): why, as the system said.
        case unreachable(String, SystemError)
        /// The supervisor (or the plugin) answered with an error.
        case remote(ErrorBody)
        /// The answer could not be read, or the connection closed before it came.
        case broken(String)

        /// What went wrong, for a person: the CLI prints it.
        public var description: String {
            switch self {
            case .unreachable(let path, let error):
                return "\(ErrorCode.unavailable.rawValue): cannot reach the supervisor at \(path) (\(error)); is `supervisor start` running with this --home or --socket?"
            case .remote(let body): return body.description
            case .broken(let why): return "\(ErrorCode.unavailable.rawValue): the supervisor's answer was unusable: \(why)"
            }
        }
    }

    /// Connects. A supervisor that holds its home's lock but has no socket yet is starting (`start &`
    /// then a command at once): its socket is waited for, up to `startingWait` seconds. With
    /// `waitForAny` (`--wait`), a missing socket is waited for even before any supervisor holds the
    /// lock (one just launched may not have made its home yet).
    public init(socketPath: String, startingWait: Double = 5, waitForAny: Bool = false) throws(Failure) {
        self.socketPath = socketPath
        let home = SupervisorLocation.home(ofSocket: socketPath)
        let deadline = ProcessControl.monotonicMicroseconds() + Int64(startingWait * 1_000_000)
        while true {
            do {
                connection = try BlockingConnection.connect(path: socketPath)
                return
            } catch {
                let notYet = error.errno == ENOENT || error.errno == ECONNREFUSED
                guard notYet, ProcessControl.monotonicMicroseconds() < deadline, waitForAny || HomeLock.isHeld(home: home) else {
                    throw .unreachable(socketPath, error)
                }
                usleep(20_000)
            }
        }
    }

    /// The control socket as the CLI finds it: `socket`, else `$SUPERVISOR_SOCKET`, else the home's
    /// (`home`, else `$SUPERVISOR_HOME`, `$XDG_DATA_HOME/sandboxed-plugins`, `~/.local/share/sandboxed-plugins`).
    public static func socketPath(home: String? = nil, socket: String? = nil) -> String {
        SupervisorLocation.socketPath(socket: socket, home: home, environment: ProcessEnvironment.all)
    }

    /// Waits at most `milliseconds` for each read from now on (a supervisor that is stopped or
    /// wedged does not hold the caller for good); past it a request fails with `timeout`.
    public mutating func giveUp(afterMilliseconds milliseconds: UInt64) {
        readLimitMs = milliseconds
        var limit = timeval(tv_sec: Int(milliseconds / 1000), tv_usec: Int(milliseconds % 1000) * 1000)
        _ = setsockopt(connection.fd, SOL_SOCKET, SO_RCVTIMEO, &limit, socklen_t(MemoryLayout<timeval>.size))
    }

    /// The failure of a read that ended: `timeout` when `giveUp` set the limit that ended it.
    private func readFailed(_ error: any Error) -> Failure {
        if let limit = readLimitMs, let e = error as? SystemError, e.errno == EAGAIN || e.errno == EWOULDBLOCK {
            return .remote(ErrorBody(.timeout, "the supervisor did not answer within \(limit) ms; it may be stopped or overloaded"))
        }
        if let e = error as? SystemError, e.errno == EPIPE || e.errno == ECONNRESET {
            // The supervisor ended the connection under a read: it drops a client that leaves too
            // much unread (answers, or a stream's chunks read too slowly) or breaks the protocol.
            return .broken("the supervisor closed the connection (\(error)): it stopped, or it drops a client that leaves more of its answers unread than it holds for one (a stream read too slowly) or sends what it may not; its log says which")
        }
        return .broken("\(error)")
    }

    /// Sends a request of `kind` with the given fields and waits for its reply; returns the raw
    /// result JSON. `progress` gets each `progress` frame the supervisor sends before its reply.
    public func request(_ kind: MessageKind, _ fill: (inout FrameBuilder) -> Void = { _ in },
                        progress: (ProgressReport) -> Void = { _ in }) throws(Failure) -> [UInt8] {
        var parsed: Envelope?
        let reply = try requestFrame(kind, fill, progress: progress, parsed: &parsed)
        let outcome: Result<[UInt8], Failure> = reply.withUnsafeBytes { bytes in
            let env: Envelope
            if let parsed {
                env = parsed
            } else {
                do { env = try Envelope.parse(bytes) } catch { return .failure(.broken("\(error)")) }
            }
            return HostCoding.answer(of: env, in: bytes).mapError { .remote($0) }
        }
        return try outcome.get()
    }

    /// Sends a request and returns its reply frame's body, whole.
    /// `tail`: inline bytes the request's attachments announce, after its JSON and a NUL.
    func requestFrame(_ kind: MessageKind, _ fill: (inout FrameBuilder) -> Void,
                      progress: (ProgressReport) -> Void = { _ in }, tail: [UInt8]? = nil) throws(Failure) -> [UInt8] {
        var parsed: Envelope?
        return try requestFrame(kind, fill, progress: progress, tail: tail, parsed: &parsed)
    }

    /// The same, with the reply's envelope when it was read whole on the way (`parsed`): a large
    /// reply (`status` of 1,000 plugins, 850 KB) is scanned once, not twice.
    func requestFrame(_ kind: MessageKind, _ fill: (inout FrameBuilder) -> Void, progress: (ProgressReport) -> Void = { _ in },
                      tail: [UInt8]? = nil, parsed: inout Envelope?) throws(Failure) -> [UInt8] {
        var b = FrameBuilder(kind: kind)
        b.uint("id", 1)
        fill(&b)
        let frame = tail.map { t in t.withUnsafeBytes { b.finish(tail: $0) } } ?? b.finish()
        do { try connection.sendFrame(frame) } catch { throw .unreachable(socketPath, error) }
        var reply: [UInt8]?
        while true {
            do { reply = try connection.receiveFrame() } catch { throw readFailed(error) }
            // Only a progress frame is decoded whole (a reply can be large: `status` with 1,000 plugins).
            guard let frame = reply else { break }
            parsed = frame.withUnsafeBytes { try? Envelope.parse($0) }
            guard parsed?.kind == .progress, let p = try? ProtocolJSON.decode(ProgressFrame.self, from: frame), p.type == .progress else { break }
            progress(ProgressReport(stage: p.stage, done: p.done, total: p.total, message: p.message))
        }
        guard let reply else { throw .broken("the supervisor closed the connection without answering") }
        return reply
    }

    /// Sends a call answered with a stream (SPEC §13; `fill` writes its fields, `stream` is added)
    /// and hands `each` every chunk's `data` as it arrives, granting credit as it takes them (so a
    /// slow `each` slows the plugin); returns the final reply's result.
    /// `each` gets an element's raw JSON, or (its second argument true) its raw bytes.
    public func stream(_ fill: (inout FrameBuilder) -> Void, _ each: (UnsafeRawBufferPointer, Bool) -> Void) throws(Failure) -> [UInt8] {
        var b = FrameBuilder(kind: .call)
        b.uint("id", 1)
        fill(&b)
        b.flag("stream")
        do { try connection.sendFrame(b.finish()) } catch { throw .unreachable(socketPath, error) }
        var taken = 0
        while true {
            let outcome: Result<[UInt8], Failure>?
            do {
                outcome = try connection.receive { bytes -> Result<[UInt8], Failure>? in
                    let env: Envelope
                    do { env = try Envelope.parse(bytes) } catch { return .failure(.broken("\(error)")) }
                    switch env.kind {
                    case .chunk?:
                        guard env.id == 1, let (element, isBytes) = StreamFrames.element(of: env) else { return nil }
                        each(UnsafeRawBufferPointer(rebasing: bytes[element]), isBytes)
                        taken += 1
                        if taken == StreamFrames.grantEvery {
                            taken = 0
                            try? connection.sendFrame(StreamFrames.credit(id: 1, n: UInt64(StreamFrames.grantEvery), into: [UInt8]()))
                        }
                        return nil
                    case .reply?:
                        return HostCoding.answer(of: env, in: bytes).mapError { .remote($0) }
                    default:
                        return nil
                    }
                } ?? .failure(.broken("the supervisor closed the connection before the stream ended"))
            } catch {
                throw readFailed(error)
            }
            if let outcome { return try outcome.get() }
        }
    }

    /// Follows the host events (`events`, SPEC §12): `each` gets every one, in order, until the
    /// supervisor goes away (then it returns) or `each` returns false.
    public func followEvents(plugin: String?, _ each: (HostEvent) -> Bool) throws(Failure) {
        _ = try request(.events) { b in if let plugin { b.string("target", plugin) } }
        while true {
            let frame: [UInt8]?
            do { frame = try connection.receiveFrame() } catch { throw .broken("\(error)") }
            guard let frame else { return }
            guard let event = try? ProtocolJSON.decode(HostEvent.self, from: frame) else {
                // A frame that is not an event (an error frame before the supervisor drops us).
                if let reply = try? ProtocolJSON.decode(ErrorReply.self, from: frame) { throw .remote(reply.error) }
                continue
            }
            if !each(event) { return }
        }
    }

    private struct ErrorReply: Decodable {
        var error: ErrorBody
    }

    /// Closes the connection.
    public func close() { connection.close() }

    private struct ProgressFrame: Decodable {
        var type: MessageKind
        var stage: String
        var done: Int64
        var total: Int64
        var message: String?
    }
}
