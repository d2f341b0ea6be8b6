#if canImport(Glibc)
import Glibc
#endif
import Dispatch
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

    private struct State {
        var pending: [UInt8] = []
        /// The writing thread has work, or is writing.
        var writing = false
        var dropped = 0
    }

    private let state = Mutex(State())
    private let descriptor: Int32
    private let notice: @Sendable (String) -> [UInt8]
    private let queue = DispatchQueue(label: "supervisor.log")

    init(descriptor: Int32, notice: @escaping @Sendable (String) -> [UInt8]) {
        self.descriptor = descriptor
        self.notice = notice
    }

    /// Queues one whole line (with its newline): written after what waits, or dropped if too much does.
    func write(_ line: some Collection<UInt8>) {
        let start = state.withLock { s -> Bool in
            guard s.pending.count + line.count <= Self.limit else {
                s.dropped += 1
                return false
            }
            s.pending.append(contentsOf: line)
            guard !s.writing else { return false }
            s.writing = true
            return true
        }
        if start { queue.async { self.drain() } }
    }

    /// Writes what waits until nothing does; on the writer's thread only.
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
            chunk.withUnsafeBytes { bytes in
                var offset = 0
                while offset < bytes.count {
                    let n = Glibc.write(descriptor, bytes.baseAddress! + offset, bytes.count - offset)
                    if n > 0 { offset += n } else if n < 0 && errno == EINTR { continue } else { return }
                }
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
