import PropertyBased
import Testing
import SupervisorCore

/// The core driven with random sequences of inputs (calls, replies, callers leaving, crashes,
/// starts, time passing, restarts, stops), the way the supervisor's driver combines its values
/// (`Route`, `WaitQueue`, `CallTable`, `PluginLife`, `RestartPolicy`, `FrameGate`), with the
/// invariants checked after every step. A failing sequence is printed with its seed and shrunk.
@Suite struct RandomInputTests {
    @Test func invariantsHoldForEverySequence() async {
        await World.check(count: 300, steps: 0...99, length: 10...250)
    }
}

/// One plugin and its callers, as the driver keeps them.
struct World: SimulatedWorld {
    struct Waiting: WaitingRequest {
        var call: Int
        var deadline: Instant
        var callerIsGone: Bool
    }

    struct InFlight: InFlightEntry {
        var call: Int
        var deadline: Instant
        var isCall: Bool { true }
    }

    enum Worker {
        case starting
        case running
    }

    static let policy = RestartPolicy(limit: 3, windowSeconds: 10, backoffBaseMs: 100, backoffMaxMs: 1_000)
    static let queueLimit = 8
    static let timeoutMs = 700

    var now = Instant(nanoseconds: 1_000_000_000_000)
    var life = PluginLife(phase: .starting)
    var queue = WaitQueue<Waiting>()
    var worker: Worker? = .starting
    var inFlight = CallTable<InFlight>()
    var gate = FrameGate()
    var restartAt: Instant?
    var shuttingDown = false

    /// Calls accepted (forwarded or queued), and every answer each got.
    var accepted: Set<Int> = []
    var answers: [Int: Int] = [:]
    var refused = 0
    var gone: Set<Int> = []
    var nextCall = 0
    /// When each restart happened, to check the intensity limit from outside the policy.
    var restartTimes: [Instant] = []

    mutating func apply(_ step: Int) {
        switch step {
        case 0..<35: call()
        case 35..<55: reply(pick: step)
        case 55..<60: callerLeaves(pick: step)
        case 60..<66: crash()
        case 66..<76: startupAnswered()
        case 76..<95: advance(ms: (step - 75) * 37)
        case 95..<97: violation()
        case 97: restartRequested()
        default: stopEverything()
        }
    }

    // MARK: Inputs, as the driver handles them

    var routeTarget: Route.Target {
        Route.Target(identifier: "p", phase: life.phase, problem: life.problem,
                     worker: worker.map { Route.Worker(stopRequested: false, connected: $0 == .running && gate.isOpen) })
    }

    mutating func call() {
        let id = nextCall
        nextCall += 1
        let deadline = now.adding(milliseconds: Self.timeoutMs)
        switch Route.decide(routeTarget, named: "p", shuttingDown: shuttingDown) {
        case .forward:
            accepted.insert(id)
            _ = inFlight.add(InFlight(call: id, deadline: deadline))
        case .wait, .activate:  // (the simulated plugin is never inactive)
            if queue.add(Waiting(call: id, deadline: deadline, callerIsGone: false), limit: Self.queueLimit) {
                accepted.insert(id)
            } else {
                refused += 1
            }
        case .refuse:
            refused += 1
        }
    }

    mutating func reply(pick: Int) {
        guard worker == .running, gate.isOpen, !inFlight.isEmpty else { return }
        let ids = inFlight.values.map(\.call).sorted()
        let call = ids[pick % ids.count]
        guard let id = inFlightID(of: call), let entry = inFlight.settle(id) else { return }
        answer(entry.call)
    }

    mutating func callerLeaves(pick: Int) {
        let waiting = queue.requests.filter { !$0.callerIsGone }.map(\.call)
        let flying = inFlight.values.map(\.call)
        let candidates = (waiting + flying).sorted()
        guard !candidates.isEmpty else { return }
        let call = candidates[pick % candidates.count]
        gone.insert(call)
        // A call in flight is cancelled at its callee: its entry leaves, unanswered.
        if let id = inFlightID(of: call) { _ = inFlight.settle(id) }
        // A waiting one is dropped when the queue next looks at it (release, expire, abandon).
        var rebuilt = WaitQueue<Waiting>()
        for var request in queue.requests {
            if request.call == call { request.callerIsGone = true }
            _ = rebuilt.add(request, limit: Int.max)
        }
        let released = queue.release()
        _ = released
        queue = rebuilt
    }

    mutating func crash() {
        guard worker != nil else { return }
        workerEnded(abnormal: true, afterStop: false)
    }

    mutating func violation() {
        guard worker != nil else { return }
        if gate.violated("not JSON") { crash() }
    }

    mutating func startupAnswered() {
        guard worker == .starting, gate.isOpen else { return }
        worker = .running
        perform(life.workerRuns("p", version: "1.0.0"))
    }

    mutating func advance(ms: Int) {
        now = now.adding(milliseconds: ms)
        for (_, entry) in inFlight.expire(now: now).expired { answer(entry.call) }
        for request in queue.expire(now: now) { answer(request.call) }
        if let reason = Route.abandonReason(routeTarget, shuttingDown: shuttingDown) {
            for request in queue.abandon() { answer(request.call, because: reason) }
        }
        if let at = restartAt, at <= now {
            restartAt = nil
            perform(life.restartDue(dependenciesRunning: true, hasWorker: worker != nil, shuttingDown: shuttingDown))
        }
    }

    mutating func restartRequested() {
        guard !shuttingDown, worker == nil, life.phase.isFailed || life.phase == .stopped else { return }
        restartAt = nil
        // `supervisor restart` is a clean slate: the intensity window starts again.
        restartTimes = []
        perform(life.startRequested(dependenciesRunning: true))
    }

    mutating func stopEverything() {
        shuttingDown = true
        restartAt = nil
        if worker != nil { workerEnded(abnormal: false, afterStop: true) }
        for request in queue.abandon() { answer(request.call, because: "the supervisor is shutting down") }
    }

    // MARK: The driver's side

    private mutating func workerEnded(abnormal: Bool, afterStop: Bool) {
        worker = nil
        gate = FrameGate()
        for (_, entry) in inFlight.removeAll() { answer(entry.call) }
        let status = abnormal ? ExitStatus(signal: "SIGSEGV", reason: .signaled) : ExitStatus(code: 0, reason: .exited)
        let ending = PluginLife.Ending(status: status, described: abnormal ? "killed by SIGSEGV" : "exited with code 0", abnormal: abnormal,
                                       afterStop: afterStop, everRan: life.hasRun)
        let context = PluginLife.Circumstances(identifier: "p", restartPolicy: .always, shuttingDown: shuttingDown)
        perform(life.workerEnded(ending, context, restartPolicy: Self.policy, now: now, jitter: 1))
    }

    private mutating func perform(_ actions: [PluginLife.Action]) {
        for action in actions {
            switch action {
            case .scheduleRestart(let delayMs, _):
                restartTimes.append(now)
                restartAt = now.adding(milliseconds: delayMs)
            case .spawn:
                worker = .starting
                gate = FrameGate()
                life.workerSpawned()
            case .serveAgain:
                for request in queue.release() {
                    switch Route.decide(routeTarget, named: "p", shuttingDown: shuttingDown) {
                    case .forward: _ = inFlight.add(InFlight(call: request.call, deadline: request.deadline))
                    case .wait, .activate: _ = queue.add(request, limit: Int.max)
                    case .refuse: answer(request.call)
                    }
                }
            case .settleWaiters(let problem?):
                // A plugin that will not run: what waits for it fails now.
                if life.phase.isFailed || life.phase == .stopped {
                    for request in queue.abandon() { answer(request.call, because: problem) }
                }
            case .stop:
                if worker != nil { workerEnded(abnormal: false, afterStop: true) }
            default:
                break
            }
        }
    }

    private func inFlightID(of call: Int) -> UInt64? {
        (1..<max(1, inFlight.nextID)).first { inFlight[$0]?.call == call }
    }

    private mutating func answer(_ call: Int, because _: String = "") {
        answers[call, default: 0] += 1
    }

    // MARK: Invariants

    func checkInvariants() {
        // No answer to a caller that is gone, and none twice.
        for (call, count) in answers {
            #expect(count == 1, "call \(call) answered \(count) times")
            #expect(!gone.contains(call) || count == 0, "call \(call) answered after its caller left")
            #expect(accepted.contains(call), "call \(call) answered but never accepted")
        }
        // Not running and without a worker at once; a worker only for a plugin coming up or running.
        if life.phase == .running { #expect(worker == .running, "running without a running worker") }
        if worker == .running { #expect(life.phase == .running) }
        if life.phase.isFailed || life.phase == .stopped { #expect(worker == nil, "\(life.phase) with a worker") }
        // Calls in flight only to a worker that runs.
        if worker != .running { #expect(inFlight.isEmpty, "calls in flight to no running worker") }
        // The intensity limit: never more restarts in a window than the policy allows.
        let window = Int64(Self.policy.windowSeconds) * 1_000_000_000
        for (index, start) in restartTimes.enumerated() {
            let inWindow = restartTimes[index...].prefix { $0.nanoseconds(since: start) < window }.count
            #expect(inWindow <= Self.policy.limit, "\(inWindow) restarts within \(Self.policy.windowSeconds) s")
        }
        // No timer outlives its subject: a restart is pending only while the plugin is restarting
        // without a worker.
        if restartAt != nil { #expect(life.phase == .restarting && worker == nil, "a restart timer in \(life.phase)") }
        if life.phase == .restarting, worker == nil, !shuttingDown { #expect(restartAt != nil, "restarting with no timer to restart it") }
        // Waiting requests only while the plugin may still run.
        if !queue.isEmpty { #expect(!shuttingDown) }
    }

    func checkEveryCallAnsweredOnce() {
        for call in accepted where !gone.contains(call) {
            #expect(answers[call] == 1, "accepted call \(call) answered \(answers[call] ?? 0) times")
        }
        #expect(inFlight.isEmpty && queue.isEmpty)
    }
}
