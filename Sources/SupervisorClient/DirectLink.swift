import CLinuxSupport
import CallTracking
import IPC
import LinuxSupport
import PluginProtocol
import Protocol
import Synchronization
#if canImport(Glibc)
import Glibc
#endif

/// A client's direct link to one plugin's worker (docs/protocol.md, "Direct links for clients"):
/// calls go over it straight to the worker and back, one hop. The client keeps what the supervisor
/// would: each call's deadline (a late call fails `timeout` and the worker gets `cancel`), and the
/// counts of the calls, reported to the supervisor (`linkCalls`) so its metrics count every call.
/// A link that ends (its worker ended) hands its calls in flight back to their callers, who send
/// each again through the supervisor naming where it was (`afterLink`, SPEC §15): replayed if the
/// worker never handed it to its plugin, retried if idempotent, else failed with `started: true`.
/// One the supervisor takes back (`unlink`: the worker is stopping) takes no new calls, and is
/// given back once its calls are settled. Either way the next calls go through the supervisor again.
package final class DirectLink: Sendable {
    package let number: UInt64
    package let target: String
    /// The callee's call timeout, for calls that name none.
    let timeoutMs: Int
    private let connection: BlockingConnection
    /// An eventfd the link's thread polls beside the link: written when a call due before the
    /// thread wakes is added (-1: none could be made; such a call's timeout waits for the wake).
    private let wakeFD: Int32
    /// What goes out over the link, written together where calls come together (LinkOutbox.swift).
    private let outbox: LinkOutbox
    private let state: Guarded<State>
    /// The next call's id (taken without the lock; a call the link no longer takes wastes one).
    private let nextID = Atomic<UInt64>(1)
    /// `"target":"<target>"`'s value, escaped once for every call.
    private let targetJSON: [UInt8]
    /// Sends a counts report on the control connection.
    private let report: @Sendable (CallHop.LinkCalls) -> Void
    /// Called once the link has ended (the client forgets it).
    private let ended: @Sendable (DirectLink) -> Void
    /// Hears each settled call's outcome and duration as it is settled (an embedded host's
    /// swift-metrics timer), beside the counts reported to the supervisor.
    private let answered: (@Sendable (CallHop.Outcome, Int64) -> Void)?
    /// How long the link's thread polls for the next reply before it sleeps, at most (`pollBriefly`;
    /// `SupervisorClient.defaultLinkPollMicroseconds`, within 0…`maxLinkPollMicroseconds`).
    private let pollMicroseconds: Int

    private struct State {
        /// The calls in flight (the product's one caller table: `expire` looks at them only once
        /// the earliest deadline has passed).
        var waiting = CallTable<Call>()
        var tally = CallHop.Tally()
        var lastReport: Int64
        /// Told to stop (`unlink`): no new calls; `answerUnlink` runs once the last is settled.
        var answerUnlink: (@Sendable () -> Void)?
        var unlinked = false
        var closed = false
        /// When the link's thread, asleep in `poll`, wakes by itself (CLOCK_MONOTONIC ns); 0 while it
        /// is awake. A call due earlier wakes it (`wakeFD`), so its timeout is kept to the
        /// millisecond rather than at the next report.
        var sleepsUntil: Int64 = 0
    }

    private struct Call: InFlightEntry {
        let continuation: UnsafeContinuation<[UInt8], any Error>
        let started: Int64
        let deadline: Instant
    }

    static let reportIntervalNanoseconds: Int64 = 1_000_000_000

    package init(number: UInt64, target: String, timeoutMs: Int, fd: Int32,
         report: @escaping @Sendable (CallHop.LinkCalls) -> Void, ended: @escaping @Sendable (DirectLink) -> Void,
         answered: (@Sendable (CallHop.Outcome, Int64) -> Void)? = nil, pollMicroseconds: Int) {
        self.number = number
        self.target = target
        targetJSON = JSONEscaping.quoted(target)
        self.timeoutMs = timeoutMs
        connection = BlockingConnection(fd: fd)
        let wake = cls_wake_fd()
        wakeFD = wake >= 0 ? wake : -1
        outbox = LinkOutbox(connection)
        state = Guarded(State(lastReport: ProcessControl.monotonicNanoseconds()))
        self.report = report
        self.ended = ended
        self.answered = answered
        self.pollMicroseconds = min(max(0, pollMicroseconds), SupervisorClient.maxLinkPollMicroseconds)
        Threads.start(name: "client-link") { [self] in run() }
    }

    /// What became of a call sent over the link.
    package enum Outcome: Sendable {
        case answered([UInt8])
        /// The link takes no calls any more: the call was not sent; it goes through the supervisor.
        case notTaken
        /// The link ended with its worker while the call was in flight: it goes through the
        /// supervisor naming where it was (`afterLink`), within what is left of its time.
        case ended(AfterLink, remaining: Duration)
    }

    /// Sends a call over the link and waits for what becomes of it.
    package func call(method: String, params: [UInt8]?, timeout: Duration?) async throws -> Outcome {
        let ms = timeout.map { Int(HostCoding.milliseconds($0)) } ?? timeoutMs
        let started = ProcessControl.monotonicNanoseconds()
        // A link that was closed meanwhile refuses it when it is added to `waiting` (`send`).
        let id = nextID.wrappingAdd(1, ordering: .relaxed).oldValue
        var frame = FrameBuilder(kind: .call, capacity: (params?.count ?? 0) + targetJSON.count + method.utf8.count + 64)
        frame.uint("id", id)
        frame.raw("target", targetJSON)
        frame.string("method", method)
        if let params { frame.raw("params", params) }
        frame.uint("timeoutMs", UInt64(ms))
        let bytes = frame.finish()
        do {
            return .answered(try await send(bytes, id: id, started: started, ms: ms))
        } catch is NotTaken {
            return .notTaken
        } catch let ended as Ended {
            let left = ended.deadline - ProcessControl.monotonicNanoseconds()
            guard left > 0 else { throw ErrorBody(.timeout, "\(target) did not answer call in time") }
            return .ended(AfterLink(link: number, id: id), remaining: .nanoseconds(left))
        }
    }

    private func send(_ bytes: [UInt8], id: UInt64, started: Int64, ms: Int) async throws -> [UInt8] {
        try await withTaskCancellationHandler {
            // Unsafe, not checked: each path below resumes it exactly once (the call is taken out of
            // `waiting` under the lock by whoever resumes it), without a checked one's allocation per call.
            try await withUnsafeThrowingContinuation { (continuation: UnsafeContinuation<[UInt8], any Error>) in
                // nil: not taken; else how many calls wait now, this one included.
                let taken = state.withLock { s -> (waiting: Int, wake: Bool)? in
                    guard !s.closed else { return nil }
                    let deadline = Instant(monotonic: started + Int64(ms) * 1_000_000)
                    s.waiting.insert(Call(continuation: continuation, started: started, deadline: deadline), id: id)
                    return (s.waiting.count, deadline.monotonic < s.sleepsUntil)
                }
                guard let (waiting, wake) = taken else { return continuation.resume(throwing: NotTaken()) }
                if wake { wakeThread() }
                if Task.isCancelled { return giveUp(id) }
                if !outbox.write(bytes, byCaller: waiting == 1) {
                    // Never reached the worker: it goes through the supervisor instead.
                    if let call = state.withLock({ $0.waiting.settle(id) }) { call.continuation.resume(throwing: NotTaken()) }
                }
            }
        } onCancel: {
            giveUp(id)
        }
    }

    /// The eventfd goes with the link itself, not with its thread: a caller that decided to wake
    /// the thread may write it after the thread has ended, and must not write a number reused since.
    deinit {
        if wakeFD >= 0 { Glibc.close(wakeFD) }
    }

    private func wakeThread() {
        var one: UInt64 = 1
        _ = write(wakeFD, &one, 8)
    }

    /// Calls sent over the link and not yet settled.
    package var callsInFlight: Int { state.withLock { $0.waiting.count } }

    /// The link had stopped taking calls when this one came (thrown inside, returned as `notTaken`).
    struct NotTaken: Error {}

    /// The link ended with its worker while the call was in flight (thrown inside, returned as
    /// `ended`); its deadline, CLOCK_MONOTONIC ns.
    struct Ended: Error {
        let deadline: Int64
    }

    private func giveUp(_ id: UInt64) {
        guard let call = state.withLock({ $0.waiting.settle(id) }) else { return }
        call.continuation.resume(throwing: CancellationError())
        sendCancel(id)
    }

    /// Through `write`, behind the call's own frame if that is still queued: a `cancel` never
    /// reaches the worker before the call it cancels. Left to a job: the link's thread sends
    /// them too (for calls past their deadline), and it only reads (`leaveCollected`).
    private func sendCancel(_ id: UInt64) {
        var cancel = FrameBuilder(kind: .cancel)
        cancel.uint("id", id)
        _ = outbox.write(cancel.finish(), byCaller: false)
    }

    /// The supervisor takes the link back: no new calls; `answer` runs once the calls in flight
    /// are settled (now, if there are none).
    package func unlink(_ answer: @escaping @Sendable () -> Void) {
        let now = state.withLock { s -> Bool in
            s.closed = true
            s.unlinked = true
            if s.waiting.isEmpty { return true }
            s.answerUnlink = answer
            return false
        }
        if now { finishUnlink(answer) }
    }

    private func finishUnlink(_ answer: @Sendable () -> Void) {
        sendReport(force: true, endedLink: nil)
        answer()
        connection.shutdown()
    }

    /// Closes the link (the client is closing).
    package func close() {
        state.withLock { $0.closed = true }
        connection.shutdown()
    }

    // MARK: The link's thread

    private func run() {
        var pollSet = [pollfd(fd: connection.fd, events: Int16(POLLIN), revents: 0), pollfd(fd: wakeFD, events: Int16(POLLIN), revents: 0)]
        var spin = SpinWindow(maxNanoseconds: pollMicroseconds * 1000)
        reading: while true {
            let now = ProcessControl.monotonicNanoseconds()
            expire(now: now)
            sendReport(force: false, endedLink: nil)
            // Every whole reply read so far, then the calls their tasks wrote meanwhile in one write.
            outbox.startCollecting()
            do {
                while try connection.nextReadFrame({ replied($0) }) != nil {}
            } catch {
                break
            }
            outbox.leaveCollected()
            let began = ProcessControl.monotonicNanoseconds()
            switch pollBriefly(&spin, from: began) {
            case .caught: continue
            case .ended: break reading
            case .nothing: break
            }
            // When it wakes by itself, said under the same lock a call is added under (just before
            // it sleeps): one due earlier wakes it (`send`).
            let waitMs = state.withLock { s -> Int32 in
                let now = ProcessControl.monotonicNanoseconds()
                let next = min(s.waiting.earliest.monotonic, now + Self.reportIntervalNanoseconds)
                let ms = Int32(max(1, min(Self.reportIntervalNanoseconds, next - now) / 1_000_000 + 1))
                s.sleepsUntil = now + Int64(ms) * 1_000_000
                return ms
            }
            let ready = poll(&pollSet, 2, waitMs)
            state.withLock { $0.sleepsUntil = 0 }
            spin.slept(waited: Int(ProcessControl.monotonicNanoseconds() - began))
            if ready == 0 || (ready < 0 && errno == EINTR) { continue }
            if pollSet[1].revents != 0 {
                var count: UInt64 = 0
                _ = read(wakeFD, &count, 8)
            }
            if pollSet[0].revents != 0 {
                guard let n = try? connection.readAvailable(), n > 0 else { break }
            }
        }
        outbox.stopCollecting()
        end()
    }

    /// What polling the socket for a moment found (`pollBriefly`).
    private enum Polled { case caught, ended, nothing }

    /// Before the link's thread sleeps: reads without waiting for as long as its window says
    /// (`SpinWindow`: while replies come close together) when no other thread of this process polls
    /// (`PollingTurn`). A reply caught so wakes nobody: on a VM a sleeping thread's CPU halts, and its
    /// wake-up costs a third of a lone call (docs/benchmarks.md, "A lone call's reply caught by polling").
    private func pollBriefly(_ spin: inout SpinWindow, from began: Int64) -> Polled {
        guard spin.currentNanoseconds > 0, PollingTurn.take() else { return .nothing }
        defer { PollingTurn.give() }
        let until = began + Int64(spin.currentNanoseconds)
        repeat {
            do {
                if let n = try connection.readAvailableNow() { return n > 0 ? .caught : .ended }
            } catch {
                return .ended
            }
        } while ProcessControl.monotonicNanoseconds() < until
        return .nothing
    }

    private func replied(_ bytes: UnsafeRawBufferPointer) {
        guard let env = try? Envelope.parse(bytes), env.kind == .reply, let id = env.id else { return }
        let now = ProcessControl.monotonicNanoseconds()
        let (call, unlinkAnswer) = state.withLock { s -> (Call?, (@Sendable () -> Void)?) in
            guard let call = s.waiting.settle(id) else { return (nil, nil) }
            s.tally.record(env.error == nil ? .ok : .error, nanoseconds: now - call.started)
            guard s.waiting.isEmpty, let answer = s.answerUnlink else { return (call, nil) }
            s.answerUnlink = nil
            return (call, answer)
        }
        // Late (it timed out): dropped, as the supervisor drops a late reply.
        guard let call else { return }
        answered?(env.error == nil ? .ok : .error, now - call.started)
        call.continuation.resume(with: HostCoding.answer(of: env, in: bytes).mapError { $0 as any Error })
        if let unlinkAnswer { finishUnlink(unlinkAnswer) }
    }

    /// Calls past their deadline fail with `timeout`, and the worker is told to `cancel`.
    private func expire(now: Int64) {
        let (late, unlinkAnswer) = state.withLock { s -> ([(UInt64, Call)], (@Sendable () -> Void)?) in
            let late = s.waiting.expire(now: Instant(monotonic: now)).expired.map { ($0.id, $0.entry) }
            for (_, call) in late { s.tally.record(.timeout, nanoseconds: now - call.started) }
            guard !late.isEmpty, s.waiting.isEmpty, let answer = s.answerUnlink else { return (late, nil) }
            s.answerUnlink = nil
            return (late, answer)
        }
        for (id, call) in late {
            answered?(.timeout, now - call.started)
            call.continuation.resume(throwing: ErrorBody(.timeout, "\(target) did not answer call in time"))
            sendCancel(id)
        }
        if let unlinkAnswer { finishUnlink(unlinkAnswer) }
    }

    private func sendReport(force: Bool, endedLink: UInt64?) {
        let now = ProcessControl.monotonicNanoseconds()
        let tally = state.withLock { s -> CallHop.Tally? in
            guard force || now - s.lastReport >= Self.reportIntervalNanoseconds else { return nil }
            s.lastReport = now
            guard !s.tally.isEmpty || endedLink != nil else { return nil }
            defer { s.tally = CallHop.Tally() }
            return s.tally
        }
        if let tally { report(CallHop.LinkCalls(target: target, calls: tally, endedLink: endedLink)) }
    }

    /// The link ended: its calls in flight go back to their callers, to be sent again through the
    /// supervisor (`Ended`; the supervisor, which read the worker's mark for the link before this
    /// end could be seen, decides which may run), the last counts go to the supervisor, and the
    /// client forgets it.
    private func end() {
        let (calls, unlinked, answer) = state.withLock { s -> ([Call], Bool, (@Sendable () -> Void)?) in
            s.closed = true
            let calls = s.waiting.removeAll().map(\.entry)
            defer { s.answerUnlink = nil }
            return (calls, s.unlinked, s.answerUnlink)
        }
        // The supervisor hears that the link ended before any caller can make its next call: that
        // call then waits for the plugin's restart instead of reaching a worker that is ending.
        sendReport(force: true, endedLink: unlinked ? nil : number)
        // By id, the order they were sent in (each task then sends its call on by itself).
        for call in calls { call.continuation.resume(throwing: Ended(deadline: call.deadline.monotonic)) }
        answer?()
        connection.close()
        ended(self)
    }
}
