import PropertyBased
import Testing
import SupervisorCore

/// Calls that survive crashes, driven with random sequences: calls sent, frames read and taken by
/// the worker, replies, callers leaving, time passing, crashes (some with no worker to follow),
/// restarts, links that end before their worker is seen to die, and workers lying in their
/// watermark both ways. The driver's side is modelled as the supervisor would carry out
/// `CrashReplay`'s actions; the plugin's side counts what it ran. After every step: no call of a
/// method not idempotent ran twice, no call ran more than 1 + `retries` times, no call was answered
/// twice or after its caller left, every call is answered or still pending, and calls reach each
/// worker (and wait in the queue) in the order they came.
@Suite struct ReplayRandomTests {
    @Test func replayInvariantsHoldForEverySequence() async {
        await ReplayWorld.check(count: 300, steps: 0...9_999, length: 10...300)
    }
}

/// One plugin, its current worker and its wait queue, as the driver would keep them.
struct ReplayWorld: SimulatedWorld {
    /// Whether a call's caller still wants the answer, shared by every copy of the call.
    final class Caller {
        var gone = false
    }

    /// A call, in the wait queue and in a worker's table alike.
    struct Call: ReplayableCall, InFlightEntry {
        var number: Int
        var method: String
        var deadline: Instant
        var retries = 0
        var crashes = 0
        var caller: Caller
        var callerIsGone: Bool { caller.gone }
    }

    /// A worker that has answered `startup`, as both sides see it.
    struct Worker {
        var table = CallTable<Call>()
        var watermark = TakenWatermark()
        /// Frames the worker has not read (what the supervisor reads back after its death).
        var socket: [UInt64] = []
        /// Read, not yet handed to the plugin.
        var read: [UInt64] = []
        /// Handed to the plugin, not yet answered (its id and call number).
        var running: [(id: UInt64, number: Int)] = []
        /// What the shared page says (the last watermark written, true or not).
        var page: UInt64 = 0
        /// The call numbers sent to it, in send order.
        var received: [Int] = []
        var numbers: [UInt64: Int] = [:]
        /// Its socket closed by itself: it may be ending, so new calls wait in the queue until it
        /// is seen to have died (they go ahead of nothing: its replays go ahead of them) or alive.
        var linkEnded = false
    }

    static let methods = ["get", "getAll", "put", "sum"]
    static let replay = CrashReplay(plugin: "p", idempotent: IdempotentMethods(patterns: ["get*"]).adding(flagged: ["sum"]), retryLimit: 2, crashLimit: 4)
    static let restartLimit = 8
    static let timeoutMs = 900

    var now = Instant(nanoseconds: 1_000_000_000_000)
    var worker: Worker?
    /// The plugin is failed (a crash loop): no worker follows until it is restarted on request.
    var failed = false
    var restartsLeft = ReplayWorld.restartLimit
    var queue = WaitQueue<Call>()
    var shuttingDown = false

    var callers: [Int: Caller] = [:]
    var methodOf: [Int: String] = [:]
    var accepted: Set<Int> = []
    var answers: [Int: Int] = [:]
    var answeredAfterGone: Set<Int> = []
    /// Times the plugin ran each call (over all its workers).
    var runs: [Int: Int] = [:]
    var nextNumber = 0
    var replayed = 0
    var retried = 0

    mutating func apply(_ step: Int) {
        let pick = step / 100
        switch step % 100 {
        case 0..<25: call(method: Self.methods[pick % Self.methods.count])
        case 25..<40: workerReads()
        case 40..<52: pluginTakes()
        case 52..<64: pluginAnswers(pick: pick)
        case 64..<67: callerLeaves(pick: pick)
        case 67: linkEnds()
        case 68..<74: crash()
        case 74..<82: workerStarts()
        case 82..<90: advance(ms: 10 + pick % 400)
        case 90..<94: lieHigh(by: 1 + UInt64(pick % 30))
        case 94..<97: lieLow(pick: pick)
        case 97..<99: restartRequested()
        default: crashWithoutSuccessor()
        }
    }

    // MARK: Inputs

    mutating func call(method: String) {
        guard !shuttingDown, !failed else { return }
        let number = nextNumber
        nextNumber += 1
        let caller = Caller()
        callers[number] = caller
        methodOf[number] = method
        accepted.insert(number)
        let call = Call(number: number, method: method, deadline: now.adding(milliseconds: Self.timeoutMs), caller: caller)
        if let w = worker, !w.linkEnded {
            send(call)
        } else {
            _ = queue.add(call, limit: .max)
        }
    }

    mutating func workerReads() {
        guard var w = worker, !w.socket.isEmpty else { return }
        w.read.append(w.socket.removeFirst())
        worker = w
    }

    /// The worker writes its watermark, then hands the call over (an honest worker's order).
    mutating func pluginTakes() {
        guard var w = worker, !w.read.isEmpty else { return }
        let id = w.read.removeFirst()
        w.page = id
        w.watermark.reported(id)
        let number = w.numbers[id]!
        w.running.append((id, number))
        runs[number, default: 0] += 1
        worker = w
    }

    mutating func pluginAnswers(pick: Int) {
        guard var w = worker, !w.running.isEmpty else { return }
        let (id, _) = w.running.remove(at: pick % w.running.count)
        if let call = w.table.settle(id) { answer(call.number) }
        worker = w
    }

    mutating func callerLeaves(pick: Int) {
        let pending = accepted.filter { answers[$0] == nil && !callers[$0]!.gone }.sorted()
        guard !pending.isEmpty else { return }
        let number = pending[pick % pending.count]
        callers[number]!.gone = true
        // In a worker, it is cancelled there: its entry leaves, unanswered (the plugin may run it yet).
        if var w = worker, let id = w.numbers.first(where: { $0.value == number && w.table.contains($0.key) })?.key {
            _ = w.table.settle(id)
            worker = w
        }
    }

    /// Claims calls it never took (maybe never sent).
    mutating func lieHigh(by extra: UInt64) {
        guard var w = worker else { return }
        w.page += extra
        w.watermark.reported(w.page)
        worker = w
    }

    /// Un-takes calls it had reported taken.
    mutating func lieLow(pick: Int) {
        guard var w = worker, w.page > 0 else { return }
        w.page = UInt64(pick) % w.page
        w.watermark.reported(w.page)
        worker = w
    }

    mutating func crash() {
        guard worker != nil else { return }
        restartsLeft -= 1
        if restartsLeft <= 0 {
            failed = true
            workerDied(successor: .never(reason: "p is failed: restarted \(Self.restartLimit) times"))
        } else {
            workerDied(successor: .comes)
        }
    }

    mutating func crashWithoutSuccessor() {
        guard worker != nil else { return }
        failed = true
        workerDied(successor: .never(reason: "p is stopped"))
    }

    /// A new worker runs, or one whose link ended turns out alive: what waits goes to it.
    mutating func workerStarts() {
        guard !failed, !shuttingDown else { return }
        if worker == nil {
            worker = Worker()
        } else if worker?.linkEnded == true {
            worker?.linkEnded = false
        } else {
            return
        }
        for call in queue.release() { send(call) }
    }

    mutating func linkEnds() {
        worker?.linkEnded = true
    }

    mutating func restartRequested() {
        guard failed, worker == nil, !shuttingDown else { return }
        failed = false
        restartsLeft = Self.restartLimit
    }

    /// Time passes; the crash loop's budget recovers a restart (a window sliding on).
    mutating func advance(ms: Int) {
        now = now.adding(milliseconds: ms)
        restartsLeft = min(Self.restartLimit, restartsLeft + 1)
        if var w = worker {
            for (_, call) in w.table.expire(now: now).expired { answer(call.number) }
            worker = w
        }
        for call in queue.expire(now: now) { answer(call.number) }
    }

    mutating func stopEverything() {
        shuttingDown = true
        if worker != nil { workerDied(successor: .never(reason: "the supervisor is shutting down")) }
        for call in queue.abandon() { answer(call.number) }
    }

    // MARK: The driver's side

    private mutating func send(_ call: Call) {
        guard var w = worker else { return }
        let id = w.table.takeID()
        w.watermark.sent(id)
        w.table.insert(call, id: id)
        w.socket.append(id)
        w.numbers[id] = call.number
        w.received.append(call.number)
        worker = w
    }

    private mutating func workerDied(successor: CrashReplay.Successor) {
        guard var w = worker else { return }
        worker = nil
        // The shared page, read after the death, is one more report.
        w.watermark.reported(w.page)
        let outcome = Self.replay.decide(w.table.removeAll(), watermark: w.watermark, unread: Set(w.socket), crash: "killed by SIGKILL",
                                         successor: successor, now: now)
        replayed += outcome.replayed
        retried += outcome.retried
        for (call, _, _) in outcome.failures { answer(call.number) }
        queue.putAhead(outcome.resent)
        if case .never = successor {
            #expect(outcome.resent.isEmpty, "calls sent again to a plugin that will not run")
            for call in queue.abandon() { answer(call.number) }
        }
    }

    private mutating func answer(_ number: Int) {
        if callers[number]!.gone { answeredAfterGone.insert(number) }
        answers[number, default: 0] += 1
    }

    // MARK: Invariants

    func checkInvariants() {
        for (number, count) in runs {
            let method = methodOf[number]!
            if Self.replay.idempotent.contains(method) {
                #expect(count <= 1 + Self.replay.retryLimit, "idempotent call \(number) ran \(count) times")
            } else {
                #expect(count <= 1, "call \(number) of \(method), not idempotent, ran \(count) times")
            }
        }
        for (number, count) in answers { #expect(count == 1, "call \(number) answered \(count) times") }
        #expect(answeredAfterGone.isEmpty, "answered after their callers left: \(answeredAfterGone.sorted())")
        // Every call is answered, given up by its caller, or pending in the worker or the queue.
        var pending = Set(queue.requests.map(\.number))
        if let w = worker { pending.formUnion(w.table.values.map(\.number)) }
        for number in accepted where answers[number] == nil && !callers[number]!.gone {
            #expect(pending.contains(number), "call \(number) is lost: neither answered nor pending")
        }
        for number in pending { #expect(answers[number] == nil, "call \(number) answered and still pending") }
        // Replays go ahead of later calls: a worker gets calls in the order they came.
        if let w = worker { #expect(w.received == w.received.sorted() && Set(w.received).count == w.received.count, "out of order: \(w.received)") }
        if queue.requests.map(\.number) != queue.requests.map(\.number).sorted() { Issue.record("queue out of order: \(queue.requests.map(\.number))") }
        if failed || shuttingDown { #expect(queue.isEmpty, "calls wait for a plugin that will not run") }
    }

    func checkEveryCallAnsweredOnce() {
        for number in accepted where !callers[number]!.gone {
            #expect(answers[number] == 1, "call \(number) answered \(answers[number] ?? 0) times")
        }
        #expect(worker == nil && queue.isEmpty)
    }
}
