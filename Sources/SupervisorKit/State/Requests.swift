#if canImport(Glibc)
import Glibc
#endif
import LinuxSupport
import NIOCore
import PluginProtocol
import Protocol
import SupervisorCore

/// A request sent to a worker and not yet answered.
struct PendingRequest: InFlightEntry {
    var origin: ReplyOrigin
    var deadline: Instant
    var what: Kind

    /// What was sent.
    enum Kind: Equatable, CustomStringConvertible {
        case call, open
        /// A lifecycle event (`startup`, `willTerminate`, ...).
        case event(EventName)
        /// A peer link taken back from a caller's worker (Routing/PeerLinks.swift).
        case unlink
        /// A worker taken over in an upgrade asked for its taken page (Routing/TakenPageAgain.swift).
        case takenPage

        var description: String {
            switch self {
            case .call: return "call"
            case .open: return "open"
            case .event(let name): return "event \(name.rawValue)"
            case .unlink: return "unlink"
            case .takenPage: return "takenPage"
            }
        }

        /// Whether its plugin is told to `cancel` it when it times out: an unlink or a page asked
        /// for is the worker's own business, not its plugin's.
        var cancelledOnTimeout: Bool { self != .unlink && self != .takenPage }
    }
    /// For requests from clients and plugins (not the supervisor's events): when it was forwarded,
    /// the target's call metrics, and the hop's trace context.
    var call: CallFacts? = nil
    /// A call with a stream either way (Routing/Streams.swift).
    var stream: StreamFlow? = nil
    /// What sends it to another worker if this one dies holding it (SPEC §15); nil for what is
    /// not sent again (events, unlinks, streams, calls whose descriptors went to the worker).
    var resend: Resend? = nil

    /// A call or open forwarded for a client or a plugin (not the supervisor's own event or unlink).
    var isCall: Bool { call != nil }
}

/// A forwarded call as it went to its worker, kept until it is answered, so that it can go to the
/// next worker if this one dies holding it (Lifecycle/HeldCalls.swift). The frame is the buffer
/// that was written (a reference, not a copy).
struct Resend {
    var frame: ByteBuffer
    /// The calling plugin, for a call from a plugin (`from`).
    var caller: String?
    var attempts: Attempts
}

/// How often a call went to a worker that died holding it (what bounds a poison call), and how
/// often it was sent again after its plugin had started it (`limits.retries`).
struct Attempts: Equatable {
    var retries = 0
    var crashes = 0

    static let first = Attempts()
}

/// What the supervisor keeps of a forwarded request to count it and log it once it is answered.
/// Small on purpose: it is copied into and out of the pending table on every call.
struct CallFacts {
    var started: NIODeadline
    /// Not counted as a reference: every plugin's `CallMetrics` stays in `Metrics` for the
    /// supervisor's life, and a retain and release on every call showed in the profile.
    unowned(unsafe) var metrics: CallMetrics
    /// Only when calls are logged (debug level).
    var log: CallLog?
}

/// What the debug-level call log says of a request: `<plugin>.<method>` or the URI, and its trace.
final class CallLog {
    let label: String
    let trace: CallTrace

    init(label: String, trace: CallTrace) {
        self.label = label
        self.trace = trace
    }
}

/// Where the answer to a request must go. Confined to the event loop like what it refers to.
enum ReplyOrigin {
    /// A CLI client, with the id it used.
    case client(ControlConnection, id: UInt64)
    /// A plugin's worker, with the id the plugin used.
    case plugin(WorkerInstance, id: UInt64)
    /// The program the supervisor is embedded in (PluginHost).
    case host(HostRequest)
    /// The supervisor itself (events, internal calls).
    case local((Result<[UInt8]?, ErrorBody>) -> Void)
}

/// A request from the program the supervisor is embedded in (`PluginHost`): settled once, on the
/// event loop, with the result's JSON or an error; a later answer (the host gave up first) is
/// dropped. Made on the program's thread, then used only on the loop: its state is in a
/// `NIOLoopBoundBox`, which only the loop can open.
final class HostRequest: Sendable {
    private struct State {
        var done: (@Sendable (Result<[UInt8], ErrorBody>) -> Void)?
        /// Its call or open forwarded to a worker and not yet answered: the worker is told to
        /// `cancel` it if the host gives up first.
        var inFlight: (callee: WorkerInstance, id: UInt64)?
    }

    private let state: NIOLoopBoundBox<State>
    /// Where `progress` frames go (installs, updates), if anywhere.
    let progress: (@Sendable (ProgressReport) -> Void)?
    /// Where a stream call's chunks and input credit go (SPEC §13), if it is one.
    let stream: Supervisor.HostStreamHandlers?
    /// Where the bytes attached to its answer go, just before it is settled (SPEC §13); without
    /// one, their descriptors are closed.
    let bytes: (@Sendable (Supervisor.HostBytes) -> Void)?

    init(on loop: EventLoop, progress: (@Sendable (ProgressReport) -> Void)? = nil, stream: Supervisor.HostStreamHandlers? = nil,
         bytes: (@Sendable (Supervisor.HostBytes) -> Void)? = nil, _ done: @escaping @Sendable (Result<[UInt8], ErrorBody>) -> Void) {
        state = .makeBoxSendingValue(State(done: done), eventLoop: loop)
        self.progress = progress
        self.stream = stream
        self.bytes = bytes
    }

    /// The answer's bytes (before `settle`): the program's now.
    func attached(_ received: Supervisor.HostBytes) {
        guard !isSettled, let bytes else {
            for fd in received.descriptors { close(fd) }
            return
        }
        bytes(received)
    }

    /// A chunk of the answer arrived (dropped once the request is settled).
    func chunk(_ data: [UInt8]) {
        guard !isSettled else { return }
        stream?.chunk(data)
    }

    /// The callee has room for `n` more chunks of the input.
    func inputCredit(_ n: UInt64) {
        guard !isSettled else { return }
        stream?.inputCredit(n)
    }

    /// Answered, or given up on.
    var isSettled: Bool { state.value.done == nil }

    var inFlight: (callee: WorkerInstance, id: UInt64)? {
        get { state.value.inFlight }
        set { state.value.inFlight = newValue }
    }

    func settle(_ result: Result<[UInt8], ErrorBody>) {
        guard let done = state.value.done else { return }
        state.value = State()
        done(result)
    }
}

/// A CLI client on the control socket. Owned by the event loop.
final class ControlConnection {
    let channel: Channel
    var closed = false
    /// Whole requests read while its answers could not be written (it is not reading them): they
    /// wait here, in order, and are acted on once there is room again, or dropped with the
    /// connection. NIO reads what is left in the socket when the client closes, whatever the
    /// back-pressure; without this, all of it would be acted on for a client that is gone.
    var deferred = CircularBuffer<ByteBuffer>()

    /// The ids of the requests among `deferred`, and the bytes it holds.
    var heldRequests: Set<UInt64> = []
    private(set) var heldBytes = 0
    /// Bytes of requests held while the client only waits for answers (its socket is still read,
    /// for what its requests in flight need): past this, reading stops too.
    static let heldLimit = 4 << 20

    /// `frame` waits, after what waits already; `request`: its id if it is a request.
    func hold(_ frame: ByteBuffer, request: UInt64?) {
        if let request { heldRequests.insert(request) }
        heldBytes += frame.readableBytes
        deferred.append(frame)
    }

    /// The first frame that waits, taken to be served.
    func takeHeld() -> ByteBuffer? {
        guard let frame = deferred.popFirst() else { return nil }
        heldBytes -= frame.readableBytes
        return frame
    }

    /// Nothing waits any more (the client went away).
    func dropHeld() {
        deferred.removeAll()
        heldRequests.removeAll()
        heldBytes = 0
    }

    /// The client cancelled request `id` while it waited: it goes, unanswered (as a cancelled
    /// call's caller is).
    func withdrawHeld(_ id: UInt64, maxDepth: Int) {
        heldRequests.remove(id)
        if let index = deferred.firstIndex(where: { Self.heading(of: $0, maxDepth: maxDepth).request == id }) {
            heldBytes -= deferred[index].readableBytes
            deferred.remove(at: index)
        }
    }

    /// What a frame is (nil: not a frame a client may send, said so in its turn) and its id, and
    /// that id again when the frame is a request it is answered for (`HeldRequests.isRequest`).
    static func heading(of frame: ByteBuffer, maxDepth: Int) -> (kind: MessageKind?, id: UInt64?, request: UInt64?) {
        frame.withUnsafeReadableBytes { bytes in
            guard let env = try? Envelope.parse(bytes, maxDepth: maxDepth), let kind = env.kind else { return (nil, nil, nil) }
            return (kind, env.id, HeldRequests.isRequest(kind) ? env.id : nil)
        }
    }

    /// The deferred requests as the bytes they came in (each with its length prefix), for the
    /// binary an upgrade hands this connection to: it reads them first.
    var deferredBytes: [UInt8] {
        var bytes: [UInt8] = []
        for frame in deferred {
            let start = bytes.count
            bytes += [0, 0, 0, 0]
            bytes.setLengthPrefix(UInt32(frame.readableBytes), at: start)
            bytes += frame.readableBytesView
        }
        return bytes
    }
    /// Requests of this client still waiting for an answer.
    var outstanding = 0
    /// Frames written to it while it was not writable and not gone out yet: each costs the
    /// supervisor its bookkeeping besides its bytes (a stream of 60-byte chunks held ~4 times its
    /// bytes), which its unread bound counts (`unreadFrameCost` a frame).
    var framesUnwritable = 0
    static let unreadFrameCost = 256
    /// Requests one client may have waiting for answers: past this, the next wait unread (as
    /// when it does not read its answers), so that a client pipelining many requests with large
    /// answers has at most this many answers coming, however slowly it reads them.
    static let mostInFlight = 256
    /// Called (on the loop, after the answer that made room) when it can be served again.
    var onRoom: (() -> Void)?
    private var roomAsked = false
    /// When it last sent a whole frame or was last answered: a client is idle only when neither
    /// happened for the idle timeout (an answer written in the same turn as the idle check must
    /// not be dropped with the connection).
    var lastActivity = NIODeadline.now()

    /// One of its requests was answered.
    func answered() {
        outstanding -= 1
        lastActivity = .now()
        // Requests it sent meanwhile waited (held, or unread in its socket since it reached the
        // limit): served, and reading resumed, once this answer's turn is over.
        guard outstanding < Self.mostInFlight, !deferred.isEmpty || outstanding == Self.mostInFlight - 1, !roomAsked, let onRoom else { return }
        roomAsked = true
        channel.eventLoop.assumeIsolated().execute { [self] in
            roomAsked = false
            onRoom()
        }
    }
    /// Its forwarded calls in flight: its id → (the callee, the callee's id), cancelled if it goes away.
    var inFlight: [UInt64: (callee: WorkerInstance, id: UInt64)] = [:]
    /// Its calls with a stream that wait for their plugin, and what it sent for them meanwhile.
    var waitingStreams: [UInt64: EarlyStream] = [:]
    /// The bytes of input those hold (`InputHolder`; at most `heldBytesLimit`: past it, the call fails).
    var heldInputBytes = 0
    /// Its `events` requests being followed (EventHub), by id.
    var following: Set<UInt64> = []
    /// The host methods it provides (HostMethods), and the plugins' calls of them it has not answered,
    /// by the id the supervisor gave them on this connection.
    var provides: Set<String> = []
    var hostCalls: [UInt64: (caller: WorkerInstance, id: UInt64)] = [:]
    var nextHostCallID: UInt64 = 1
    /// Its direct links to workers, by callee identifier (Routing/ClientLinks.swift), and the
    /// `unlink`s it was sent and has not answered, by the supervisor's id on this connection.
    var linksOut: [String: PeerLink] = [:]
    var unlinks: [UInt64: (link: PeerLink, deadline: Scheduled<Void>)] = [:]
    /// Its links whose worker died, for the calls it sends again (`afterLink`, LinkMarks.swift).
    var endedLinks = EndedLinks()
    /// The plugins it held a link to: whose call counts it may report (`linkCalls`), also after
    /// the link was settled here.
    var linkedCallees: Set<String> = []
    /// Its frame codec's leftovers, kept when an upgrade takes the codec out.
    let leftovers = FrameCodec.Leftovers()
    /// It listens (events, host methods) or holds links: it is never dropped as idle.
    var listens: Bool { !following.isEmpty || !provides.isEmpty || !linksOut.isEmpty }

    init(channel: Channel) {
        self.channel = channel
    }
}
