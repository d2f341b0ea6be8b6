import IPC
import LinuxSupport
import PluginProtocol

/// A direct link's outgoing frames (DirectLink): a lone call's frame is written by its task at
/// once; frames made while another task writes, while other calls wait, or while the link's thread
/// delivers replies are left to one writer, so with many calls at once one system call carries
/// many frames. The link's thread itself never writes (see `leaveCollected`).
final class LinkOutbox: Sendable {
    private let connection: BlockingConnection
    /// Frames waiting for the task that is writing now, or for a job (`write`).
    private let state = Guarded(Outgoing())

    init(_ connection: BlockingConnection) {
        self.connection = connection
    }

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
    func write(_ frame: [UInt8], byCaller: Bool) -> Bool {
        enum Next { case broken, taken, writeLater, write([UInt8]) }
        let next = state.withLock { o -> Next in
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
        let batch: [UInt8]? = state.withLock { o -> [UInt8]? in
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
    func leaveCollected() {
        let schedule = state.withLock { o -> Bool in
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
                state.withLock { o in
                    o.broken = true
                    o.writing = false
                    o.bytes = []
                }
                return !(first && ownFrameFirst)
            }
            first = false
            let more = state.withLock { o -> [UInt8]? in
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

    /// The link's thread starts delivering the replies of one read (`leaveCollected` ends it).
    func startCollecting() {
        state.withLock { $0.collecting = true }
    }

    /// The link's thread delivers no more (the link ended).
    func stopCollecting() {
        state.withLock { $0.collecting = false }
    }
}
