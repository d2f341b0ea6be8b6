#if canImport(Glibc)
import Glibc
#endif
import CLinuxSupport
import LinuxSupport
import Logging
import Synchronization

/// Where the supervisor's log lines go (stderr), written by a thread of their own: a log reader
/// that stops taking them (a journald that hangs, a `| less` left open, a log shipper stuck
/// without closing its pipe) never holds the thread that logged, which is the event loop most of
/// the time, and with it every call, `status` and the shutdown that SIGTERM asks for.
///
/// Lines wait in order, up to `limit` bytes; past that they are dropped and counted, and once the
/// reader takes again a line says how many (`dropped <n> log lines: ...`). `flush` waits, for a
/// bounded time, until what waits is written: at exit, and before an upgrade's exec, which would
/// end the writing thread.
public final class LogWriter: Sendable {
    /// stderr, for `start`'s text log and its JSON log: each says what was dropped in its format.
    public static let text = LogWriter(descriptor: 2) { message in
        var now = time(nil)
        var parts = tm()
        localtime_r(&now, &parts)
        var stamp = [CChar](repeating: 0, count: 64)
        let n = strftime(&stamp, stamp.count, "%Y-%m-%dT%H:%M:%S%z", &parts)
        let time = String(decoding: stamp.prefix(n).map { UInt8(bitPattern: $0) }, as: UTF8.self)
        return Array("\(time) warning supervisor: [SupervisorKit] \(message)\n".utf8)
    }
    public static let json = LogWriter(descriptor: 2) { message in
        JSONLogHandler.line(time: JSONLogHandler.now(), level: .warning, message: message, metadata: [:]) + [UInt8(ascii: "\n")]
    }

    /// Bytes that may wait for the reader.
    static let limit = 8 << 20
    /// A line a pipe writes whole (PIPE_BUF): written at once when the reader has room.
    static let atomicLine = 4096

    private struct State {
        var pending: [UInt8] = []
        /// The writing thread has work, or is writing.
        var writing = false
        var dropped = 0
        /// The writing thread: not yet asked for, running, or not to be had (lines are written
        /// by the thread that logs, as before: a process that cannot make one more thread).
        var thread: ThreadState = .none
    }

    private enum ThreadState { case none, running, unavailable }
    private enum Next { case nothing, wake, start, writeHere }

    private let state = Mutex(State())
    private let descriptor: Int32
    private let notice: @Sendable (String) -> [UInt8]
    /// Wakes the writing thread: written when lines come to a thread that waits for them.
    private let wake: Int32

    init(descriptor: Int32, notice: @escaping @Sendable (String) -> [UInt8]) {
        self.descriptor = descriptor
        self.notice = notice
        wake = cls_wake_fd()
    }

    /// Queues one whole line (with its newline): written after what waits, or dropped if too much
    /// does. Not Dispatch: where no thread can be made (an address-space or tasks limit), its
    /// queues sleep and retry on the caller's thread, which is the event loop.
    func write(_ line: some Collection<UInt8>) {
        let next = state.withLock { s -> Next in
            // Nothing waits and the reader has room: written now, by this thread (a line that
            // fits a pipe's atomic write cannot block then), so that what a crash or a trap
            // cuts short has its last lines written.
            if s.pending.isEmpty, !s.writing, s.dropped == 0, line.count <= Self.atomicLine, hasRoom() {
                writeAll(Array(line))
                return .nothing
            }
            if s.thread == .none {
                s.thread = wake >= 0 ? .running : .unavailable
                if s.thread == .running {
                    s.pending.append(contentsOf: line)
                    s.writing = true
                    return .start
                }
            }
            if s.thread == .unavailable { return .writeHere }
            guard s.pending.count + line.count <= Self.limit else {
                s.dropped += 1
                return .nothing
            }
            s.pending.append(contentsOf: line)
            guard !s.writing else { return .nothing }
            s.writing = true
            return .wake
        }
        switch next {
        case .nothing: break
        case .wake: signal()
        case .writeHere: writeAll(Array(line))
        case .start:
            guard Threads.tryStart(name: "log", { [self] in run() }) else {
                // No thread: what was queued is written here, and from now on every line.
                let queued = state.withLock { s -> [UInt8] in
                    s.thread = .unavailable
                    s.writing = false
                    defer { s.pending = [] }
                    return s.pending
                }
                return writeAll(queued)
            }
        }
    }

    /// Whether a write to the descriptor would not wait now (POLLOUT: a pipe with a PIPE_BUF of
    /// room, a socket with room, a file).
    private func hasRoom() -> Bool {
        var ready = pollfd(fd: descriptor, events: Int16(POLLOUT), revents: 0)
        return poll(&ready, 1, 0) == 1 && ready.revents & Int16(POLLOUT) != 0
    }

    private func signal() {
        var one: UInt64 = 1
        _ = Glibc.write(wake, &one, 8)
    }

    /// The writing thread: writes what waits, then waits for the next line.
    private func run() {
        while true {
            drain()
            var ready = pollfd(fd: wake, events: Int16(POLLIN), revents: 0)
            while poll(&ready, 1, -1) < 0 && errno == EINTR {}
            var count: UInt64 = 0
            _ = Glibc.read(wake, &count, 8)
        }
    }

    /// Writes what waits until nothing does.
    private func drain() {
        while true {
            let chunk: [UInt8]? = state.withLock { s in
                if s.pending.isEmpty, s.dropped > 0 {
                    s.pending = notice("dropped \(s.dropped) log lines: the log's reader did not take them (more than \(Self.limit >> 20) MiB waited)")
                    s.dropped = 0
                }
                guard !s.pending.isEmpty else {
                    s.writing = false
                    return nil
                }
                defer { s.pending = [] }
                return s.pending
            }
            guard let chunk else { return }
            writeAll(chunk)
        }
    }

    private func writeAll(_ bytes: [UInt8]) {
        bytes.withUnsafeBytes { bytes in
            var offset = 0
            while offset < bytes.count {
                let n = Glibc.write(descriptor, bytes.baseAddress! + offset, bytes.count - offset)
                if n > 0 { offset += n } else if n < 0 && errno == EINTR { continue } else { return }
            }
        }
    }

    /// `flush` of both (the one not in use has nothing).
    public static func flushAll(milliseconds: Int = 2_000) {
        text.flush(milliseconds: milliseconds)
        json.flush(milliseconds: milliseconds)
    }

    /// Waits until every line queued so far is written, or `milliseconds` have passed.
    public func flush(milliseconds: Int = 2_000) {
        for _ in 0..<max(1, milliseconds) {
            if !state.withLock({ $0.writing }) { return }
            usleep(1_000)
        }
    }
}

/// swift-log's `StreamLogHandler` writes each line with one `write`: here, to the text log's writer.
struct LogWriterStream: TextOutputStream, Sendable {
    let writer: LogWriter

    mutating func write(_ string: String) {
        writer.write(string.utf8)
    }
}
