/// Where the fork server stands, as a value (docs/sandbox.md, "The fork server"): each phase carries
/// its data, and each input says what to do. Generic over the server's handle, so it is tested
/// without processes (`ForkServerStateTests`); `Lifecycle` (WorkerStart.swift) drives it with
/// `ForkServerConnection`.
package struct ForkServerState<Server: AnyObject> {
    package enum Phase {
        /// None: not asked for, not launched yet, or the last one ended (or broke) and its exit is
        /// awaited to start another.
        case none
        /// Launched; its answer (it has loaded the worker's code) is not read yet.
        case launching(Server)
        case ready(Server)
        /// Workers are exec'd from here on, for `reason`. `ended`: a server that refused at start and
        /// was ended by us: its exit is not one more death.
        case givenUp(reason: String, ended: Server?)
    }

    private(set) var phase = Phase.none
    /// When it ended unasked, recently (within `endWindow`).
    package private(set) var ends: [Instant] = []
    /// At most `endLimit` unasked ends within `endWindow`, then workers are exec'd.
    package let endLimit: Int
    package let endWindow: Duration

    package init(endLimit: Int = 3, endWindow: Duration = .seconds(60)) {
        self.endLimit = endLimit
        self.endWindow = endWindow
    }

    /// The server to fork from, once it answered.
    package var ready: Server? { if case .ready(let s) = phase { s } else { nil } }
    /// A server launched and not yet answered.
    package var launching: Server? { if case .launching(let s) = phase { s } else { nil } }
    /// Whether one is running or coming (so none is to be launched).
    /// The one launched or ready, if any.
    package var current: Server? { ready ?? launching }

    package var isRunningOrComing: Bool {
        switch phase {
        case .ready, .launching: true
        case .none, .givenUp: false
        }
    }
    /// Why workers are exec'd although the fork server was asked for, for good (nil while one is
    /// ready, coming, or awaited).
    package var problem: String? { if case .givenUp(let reason, _) = phase { reason } else { nil } }

    // MARK: Inputs

    package mutating func launched(_ server: Server) {
        phase = .launching(server)
    }

    /// It could not be launched or watched: workers are exec'd.
    package mutating func launchFailed(_ reason: String) {
        phase = .givenUp(reason: reason, ended: nil)
    }

    /// Its answer was read: it serves.
    package mutating func answered(_ server: Server) {
        guard case .launching(let s) = phase, s === server else { return }
        phase = .ready(server)
    }

    /// It refused to serve (and was ended by us): workers are exec'd.
    package mutating func refused(_ server: Server, _ reason: String) {
        phase = .givenUp(reason: reason, ended: server)
    }

    /// A spawn through it found it broken (it was ended): another starts once its exit is seen.
    package mutating func broke(_ server: Server) {
        if case .ready(let s) = phase, s === server { phase = .none }
    }

    /// Shutdown: what runs or is coming, to stop; none starts from here on.
    package mutating func shutdown() -> Server? {
        defer { if isRunningOrComing { phase = .none } }
        switch phase {
        case .ready(let s), .launching(let s): return s
        case .none, .givenUp: return nil
        }
    }

    package enum AfterEnd: Equatable {
        /// Nothing to do: it was ours to end, another is running, or the supervisor is stopping.
        case nothing
        case startAnother
        /// It ended too often: workers are exec'd from now on, for this reason (logged once).
        case gaveUp(String)
    }

    /// A fork server's process ended (`how`: its exit, as the log says it). At shutdown, or when
    /// it was one we ended, that is all; otherwise another starts, unless it keeps ending.
    package mutating func ended(_ server: Server, pid: Int32, how: String, now: Instant, shuttingDown: Bool) -> AfterEnd {
        switch phase {
        case .givenUp(let reason, let ended) where ended === server:
            phase = .givenUp(reason: reason, ended: nil)
            return .nothing
        case .ready(let s) where s === server, .launching(let s) where s === server:
            phase = .none
        default:
            break
        }
        guard !shuttingDown, case .none = phase else { return .nothing }
        ends = ends.filter { now.nanoseconds(since: $0) < endWindow.nanoseconds } + [now]
        if ends.count >= endLimit {
            let reason = "the fork server ended \(ends.count) times within \(endWindow.components.seconds) s (last: pid \(pid), \(how)); workers are exec'd"
            phase = .givenUp(reason: reason, ended: nil)
            return .gaveUp(reason)
        }
        return .startAnother
    }
}
