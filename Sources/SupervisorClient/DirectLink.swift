import CLinuxSupport
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
/// A link that ends (its worker ended) fails its calls in flight `unavailable`; one the supervisor
/// takes back (`unlink`: the worker is stopping) takes no new calls, and is given back once its calls
/// are settled. Either way the next calls go through the supervisor again.
package final class DirectLink: Sendable {
    package let number: UInt64
    package let target: String
    /// The callee's call timeout, for calls that name none.
    let timeoutMs: Int
    private let connection: BlockingConnection
    private let state: Locked<State>
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
    /// How long the link's thread polls for the next reply before it sleeps, at most (`pollBriefly`).
    private let pollMicroseconds: Int

    /// The default of `pollMicroseconds`: a little more than a lone call's time here, so the reply
    /// of a call made right after the last one is caught.
    package static let defaultPollMicroseconds = 50

    private struct State {
        var waiting: [UInt64: Call] = [:]
        /// No call in `waiting` has an earlier deadline (one may have a later one: the earliest's
        /// call may be answered already); `expire` looks at the calls only once it has passed.
        var earliestDeadline: Int64 = .max
        var tally = CallHop.Tally()
        var lastReport: Int64
        /// Told to stop (`unlink`): no new calls; `answerUnlink` runs once the last is settled.
        var answerUnlink: (@Sendable () -> Void)?
        var unlinked = false
        var closed = false
    }

    private struct Call {
        let continuation: UnsafeContinuation<[UInt8], any Error>
        let started: Int64
        let deadline: Int64
    }

    static let reportIntervalNanoseconds: Int64 = 1_000_000_000

    package init(number: UInt64, target: String, timeoutMs: Int, fd: Int32,
         report: @escaping @Sendable (CallHop.LinkCalls) -> Void, ended: @escaping @Sendable (DirectLink) -> Void,
         answered: (@Sendable (CallHop.Outcome, Int64) -> Void)? = nil, pollMicroseconds: Int = DirectLink.defaultPollMicroseconds) {
        self.number = number
        self.target = target
        targetJSON = JSONEscaping.quoted(target)
        self.timeoutMs = timeoutMs
        connection = BlockingConnection(fd: fd)
        state = Locked(State(lastReport: ProcessControl.monotonicNanoseconds()))
        self.report = report
        self.ended = ended
        self.answered = answered
        self.pollMicroseconds = max(0, pollMicroseconds)
        Threads.start(name: "client-link") { [self] in run() }
    }

    /// Sends a call over the link and waits for its answer; nil when the link takes no calls any
    /// more (the call was not sent: the caller goes through the supervisor).
    package func call(method: String, params: [UInt8]?, timeout: Duration?) async throws -> [UInt8]? {
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
            return try await send(bytes, id: id, started: started, ms: ms)
        } catch is NotTaken {
            return nil
        }
    }

    private func send(_ bytes: [UInt8], id: UInt64, started: Int64, ms: Int) async throws -> [UInt8] {
        try await withTaskCancellationHandler {
            // Unsafe, not checked: each path below resumes it exactly once (the call is taken out of
            // `waiting` under the lock by whoever resumes it), without a checked one's allocation per call.
            try await withUnsafeThrowingContinuation { (continuation: UnsafeContinuation<[UInt8], any Error>) in
                // nil: not taken; else how many calls wait now, this one included.
                let waiting = state.withLock { s -> Int? in
                    guard !s.closed else { return nil }
                    let deadline = started + Int64(ms) * 1_000_000
                    s.waiting[id] = Call(continuation: continuation, started: started, deadline: deadline)
                    s.earliestDeadline = min(s.earliestDeadline, deadline)
                    return s.waiting.count
                }
                guard let waiting else { return continuation.resume(throwing: NotTaken()) }
                if Task.isCancelled { return giveUp(id) }
                if !write(bytes, byCaller: waiting == 1) {
                    // Never reached the worker: it goes through the supervisor instead.
                    if let call = state.withLock({ $0.waiting.removeValue(forKey: id) }) { call.continuation.resume(throwing: NotTaken()) }
                }
            }
        } onCancel: {
            giveUp(id)
        }
    }

    /// Frames waiting for the task that is writing now, or for the link's thread (`write`).
    private let outgoing = Locked(Outgoing())

    private struct Outgoing {
        var bytes: [UInt8] = []
        var writing = false
        var broken = false
        /// The link's thread is delivering the replies of one read: frames written meanwhile (the
        /// next calls of the tasks it resumes) wait for it to schedule one job that writes them
        /// all, before it polls again (`leaveCollected`).
        var collecting = false
        /// A job is on its way to write what has been added by then (`writeLeft`).
        var flushScheduled = false
    }

    /// Writes `frame`, or leaves it to whoever writes next: a task writing now (it takes it with
    /// its next write) or, for a call made while others wait (not `byCaller`) or while the link's
    /// thread delivers replies, a job on the executor that writes whatever has been added by the
    /// time it runs: with many calls at once, one system call carries many frames (as the
    /// supervisor's one flush per turn does), and a lone call is written at once. False when the
    /// link is broken (nothing of this frame was written).
    private func write(_ frame: [UInt8], byCaller: Bool) -> Bool {
        enum Next { case broken, taken, writeLater, write([UInt8]) }
        let next = outgoing.withLock { o -> Next in
            guard !o.broken else { return .broken }
            o.bytes += frame
            if o.writing || o.collecting || o.flushScheduled { return .taken }
            if !byCaller {
                o.flushScheduled = true
                return .writeLater
            }
            o.writing = true
            defer { o.bytes = [] }
            return .write(o.bytes)
        }
        switch next {
        case .broken: return false
        case .taken: return true
        case .writeLater:
            Task { self.writeLeft() }
            return true
        case .write(let batch): return writeAll(batch, ownFrameFirst: true)
        }
    }

    /// The job `write` (or the link's thread) scheduled: what was added by now, in one write.
    private func writeLeft() {
        let batch: [UInt8]? = outgoing.withLock { o -> [UInt8]? in
            o.flushScheduled = false
            guard !o.writing, !o.broken, !o.bytes.isEmpty else { return nil }
            o.writing = true
            defer { o.bytes = [] }
            return o.bytes
        }
        if let batch { _ = writeAll(batch, ownFrameFirst: false) }
    }

    /// The link's thread, before it polls: what the tasks it resumed wrote meanwhile goes to one
    /// job on the executor. This thread only reads: a write of its own could wait for room in a
    /// full socket while the worker waits for room to write its replies, which only this thread
    /// makes (each side would wait for the other until the worker gives the link up).
    private func leaveCollected() {
        let schedule = outgoing.withLock { o -> Bool in
            o.collecting = false
            guard !o.writing, !o.broken, !o.flushScheduled, !o.bytes.isEmpty else { return false }
            o.flushScheduled = true
            return true
        }
        if schedule { Task { self.writeLeft() } }
    }

    /// Writes `batch`, then what was added meanwhile, until nothing is left (the writer's loop).
    /// False when the first write failed and `ownFrameFirst`: the writer's own frame (in that first
    /// batch) was not sent, and its call goes through the supervisor. Frames of a later batch (or
    /// left for the link's thread or a scheduled job) end with the link: their calls fail `unavailable`.
    private func writeAll(_ batch: [UInt8], ownFrameFirst: Bool) -> Bool {
        var next = batch
        var first = true
        while true {
            do {
                try connection.sendFrame(next)
            } catch {
                outgoing.withLock { o in
                    o.broken = true
                    o.writing = false
                    o.bytes = []
                }
                return !(first && ownFrameFirst)
            }
            first = false
            let more = outgoing.withLock { o -> [UInt8]? in
                if o.bytes.isEmpty {
                    o.writing = false
                    return nil
                }
                defer { o.bytes = [] }
                return o.bytes
            }
            guard let more else { return true }
            next = more
        }
    }

    /// The link had stopped taking calls when this one came (thrown inside, returned as nil).
    struct NotTaken: Error {}

    private func giveUp(_ id: UInt64) {
        guard let call = state.withLock({ $0.waiting.removeValue(forKey: id) }) else { return }
        call.continuation.resume(throwing: CancellationError())
        sendCancel(id)
    }

    /// Through `write`, behind the call's own frame if that is still queued: a `cancel` never
    /// reaches the worker before the call it cancels. Left to a job: the link's thread sends
    /// them too (for calls past their deadline), and it only reads (`leaveCollected`).
    private func sendCancel(_ id: UInt64) {
        var cancel = FrameBuilder(kind: .cancel)
        cancel.uint("id", id)
        _ = write(cancel.finish(), byCaller: false)
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
        var pollSet = pollfd(fd: connection.fd, events: Int16(POLLIN), revents: 0)
        var spin = SpinWindow(maxNanoseconds: pollMicroseconds * 1000)
        reading: while true {
            let now = ProcessControl.monotonicNanoseconds()
            expire(now: now)
            sendReport(force: false, endedLink: nil)
            // Every whole reply read so far, then the calls their tasks wrote meanwhile in one write.
            outgoing.withLock { $0.collecting = true }
            do {
                while try connection.nextReadFrame({ replied($0) }) != nil {}
            } catch {
                break
            }
            leaveCollected()
            let next = state.withLock { s in min(s.earliestDeadline, now + Self.reportIntervalNanoseconds) }
            let waitMs = Int32(max(1, min(Self.reportIntervalNanoseconds, next - now) / 1_000_000 + 1))
            let began = ProcessControl.monotonicNanoseconds()
            switch pollBriefly(&spin, from: began) {
            case .caught: continue
            case .ended: break reading
            case .nothing: break
            }
            let ready = poll(&pollSet, 1, waitMs)
            spin.slept(waited: Int(ProcessControl.monotonicNanoseconds() - began))
            if ready == 0 || (ready < 0 && errno == EINTR) { continue }
            guard let n = try? connection.readAvailable(), n > 0 else { break }
        }
        outgoing.withLock { $0.collecting = false }
        end()
    }

    /// What polling the socket for a moment found (`pollBriefly`).
    private enum Polled { case caught, ended, nothing }

    /// Before the link's thread sleeps: reads without waiting for as long as its window says
    /// (`SpinWindow`: while replies have come close together), when no other thread of this process
    /// polls now (`PollingTurn`). A reply caught this way is read without waking this thread: on a virtual
    /// machine an idle CPU has halted, and waking a sleeping thread there costs tens of
    /// microseconds, a third of a lone call's time here (docs/benchmarks.md, "A lone call's reply
    /// caught by polling").
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
            guard let call = s.waiting.removeValue(forKey: id) else { return (nil, nil) }
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
            guard now >= s.earliestDeadline else { return ([], nil) }
            let late = s.waiting.filter { $0.value.deadline <= now }
            for (id, call) in late {
                s.waiting[id] = nil
                s.tally.record(.timeout, nanoseconds: now - call.started)
            }
            s.earliestDeadline = s.waiting.values.lazy.map(\.deadline).min() ?? .max
            guard !late.isEmpty, s.waiting.isEmpty, let answer = s.answerUnlink else { return (Array(late), nil) }
            s.answerUnlink = nil
            return (Array(late), answer)
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

    /// The link ended: its calls in flight fail `unavailable` (the worker ended before answering),
    /// the last counts go to the supervisor, and the client forgets it.
    private func end() {
        let now = ProcessControl.monotonicNanoseconds()
        let (calls, unlinked, answer) = state.withLock { s -> ([Call], Bool, (@Sendable () -> Void)?) in
            s.closed = true
            let calls = Array(s.waiting.values)
            s.waiting = [:]
            for call in calls { s.tally.record(.unavailable, nanoseconds: now - call.started) }
            defer { s.answerUnlink = nil }
            return (calls, s.unlinked, s.answerUnlink)
        }
        // The supervisor hears that the link ended before any caller can make its next call: that
        // call then waits for the plugin's restart instead of reaching a worker that is ending.
        sendReport(force: true, endedLink: unlinked ? nil : number)
        for call in calls {
            answered?(.unavailable, now - call.started)
            call.continuation.resume(throwing: ErrorBody(.unavailable, "the worker of \(target) ended before answering call"))
        }
        answer?()
        connection.close()
        ended(self)
    }
}
