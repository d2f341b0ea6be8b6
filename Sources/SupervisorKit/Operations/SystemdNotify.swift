#if canImport(Glibc)
import Glibc
#endif
import LinuxSupport
import Logging
import NIOCore
import SupervisorCore

/// systemd's notify protocol (sd_notify(3), SPEC §10), spoken by hand: one datagram per message to
/// `$NOTIFY_SOCKET` (a path, or `@name` for an abstract socket). Every message is sent from the event
/// loop, WATCHDOG=1 included, so a wedged loop stops the keep-alives and systemd restarts the service.
/// Inert (every method returns at once) when the supervisor was not started with `NOTIFY_SOCKET`.
final class SystemdNotify: SupervisorComponent {
    unowned let shared: Shared
    private let endpoint: Endpoint?
    /// The datagram socket (close-on-exec), open for the supervisor's life once `start` ran.
    private var socketFD: Int32 = -1
    private var lastStatus = ""
    private var timers: [RepeatedTask] = []
    private var warnedSendFailure = false
    /// Reloads under way: READY=1 goes out when the last one has settled.
    private var reloadsRunning = 0

    /// What the environment said, read once before any thread starts.
    struct Endpoint: Equatable {
        var socketPath: String
        /// Half of WATCHDOG_USEC: the interval of WATCHDOG=1 (nil: no watchdog for this process).
        var watchdogInterval: TimeAmount?
        /// WATCHDOG_USEC as given when it is no positive number of microseconds (said at start:
        /// systemd's watchdog would kill a supervisor that sends no keep-alive).
        var unreadableWatchdog: String?

        /// `NOTIFY_SOCKET`, `WATCHDOG_USEC` and `WATCHDOG_PID` as sd_notify(3) and sd_watchdog_enabled(3)
        /// read them: the watchdog is ours only when WATCHDOG_PID is unset or is our pid.
        static func from(environment: [String: String], pid: pid_t) -> Endpoint? {
            guard let path = environment["NOTIFY_SOCKET"], path.hasPrefix("/") || path.hasPrefix("@"), path.utf8.count > 1 else { return nil }
            var interval: TimeAmount?
            var unreadable: String?
            if let text = environment["WATCHDOG_USEC"], environment["WATCHDOG_PID"].map({ pid_t($0) == pid }) ?? true {
                if let usec = Int64(text), usec > 0 { interval = .microseconds(usec / 2) } else { unreadable = text }
            }
            return Endpoint(socketPath: path, watchdogInterval: interval, unreadableWatchdog: unreadable)
        }
    }

    init(_ shared: Shared, endpoint: Endpoint?) {
        self.shared = shared
        self.endpoint = endpoint
    }

    var isActive: Bool { endpoint != nil }

    /// Opens the datagram socket and starts the watchdog and the status updates (on the loop).
    func start() {
        loop.preconditionInEventLoop()
        guard let endpoint else { return }
        let fd = socket(AF_UNIX, Int32(SOCK_DGRAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        guard fd >= 0 else {
            logger.warning("systemd notify: cannot open a datagram socket: \(String(cString: strerror(errno)))")
            return
        }
        socketFD = fd
        if let text = endpoint.unreadableWatchdog {
            logger.warning("systemd watchdog: WATCHDOG_USEC is '\(LogText.escaped(text))', not a positive number of microseconds; no WATCHDOG=1 is sent")
        }
        let me = handOff(self)
        if let interval = endpoint.watchdogInterval {
            logger.info("systemd watchdog: WATCHDOG=1 every \(interval.nanoseconds >= 10_000_000 ? "\(interval.nanoseconds / 1_000_000) ms" : "\(interval.nanoseconds / 1_000) µs")")
            send("WATCHDOG=1")
            timers.append(loop.scheduleRepeatedTask(initialDelay: interval, delay: interval) { _ in me.value.send("WATCHDOG=1") })
        }
        timers.append(loop.scheduleRepeatedTask(initialDelay: .seconds(1), delay: .seconds(1)) { _ in me.value.updateStatus() })
    }

    /// Every startable plugin has started (the ready line).
    func ready() {
        lastStatus = summary()
        send("READY=1\nSTATUS=\(lastStatus)")
    }

    /// A reload (SIGHUP, `supervisor reload`) begins.
    func reloadBegan() {
        reloadsRunning += 1
        guard reloadsRunning == 1 else { return }
        send("RELOADING=1\nMONOTONIC_USEC=\(ProcessControl.monotonicMicroseconds())\nSTATUS=reloading the plugin folders")
    }

    /// A reload has settled: what it started runs or has failed.
    func reloadEnded() {
        reloadsRunning = max(0, reloadsRunning - 1)
        guard reloadsRunning == 0 else { return }
        lastStatus = summary()
        send("READY=1\nSTATUS=\(lastStatus)")
    }

    /// Shutdown begins; the watchdog stops with it (systemd's stop timeout applies from here).
    func stopping() {
        for t in timers { t.cancel() }
        timers = []
        send("STOPPING=1\nSTATUS=stopping")
    }

    /// STATUS= when the summary changed since it was last sent.
    func updateStatus() {
        guard isActive, shared.phase == .launched, reloadsRunning == 0 else { return }
        let now = summary()
        guard now != lastStatus else { return }
        lastStatus = now
        send("STATUS=\(now)")
    }

    /// One line: how many plugins run, start, wait to be needed, have failed or stopped.
    func summary() -> String {
        var running = 0, starting = 0, inactive = 0, failed = 0, stopped = 0
        for record in table.all {
            switch record.phase {
            case .running: running += 1
            case .failed: failed += 1
            case .stopped: stopped += 1
            case .inactive: inactive += 1
            case .waiting, .starting, .restarting: starting += 1
            }
        }
        var parts = ["\(running) plugin\(running == 1 ? "" : "s") running"]
        if starting > 0 { parts.append("\(starting) starting") }
        if inactive > 0 { parts.append("\(inactive) inactive until needed") }
        if failed > 0 { parts.append("\(failed) failed") }
        if stopped > 0 { parts.append("\(stopped) stopped") }
        return parts.joined(separator: ", ")
    }

    /// One datagram, never blocking the loop (a full queue drops it: the next one follows).
    private func send(_ message: String) {
        guard let endpoint, socketFD >= 0 else { return }
        let rc = withSocketAddress(endpoint.socketPath) { address, length in
            message.withCString { text in
                sendto(socketFD, text, strlen(text), Int32(MSG_DONTWAIT | MSG_NOSIGNAL), address, length)
            }
        }
        if rc < 0 && !warnedSendFailure {
            warnedSendFailure = true
            logger.warning("systemd notify: cannot send to \(endpoint.socketPath): \(String(cString: strerror(errno)))")
        }
    }

    private func withSocketAddress<R>(_ path: String, _ body: (UnsafePointer<sockaddr>, socklen_t) -> R) -> R {
        var address = sockaddr_un()
        address.sun_family = sa_family_t(AF_UNIX)
        var bytes = Array(path.utf8)
        let abstract = bytes.first == UInt8(ascii: "@")
        if abstract { bytes[0] = 0 }
        let capacity = MemoryLayout.size(ofValue: address.sun_path)
        let count = min(bytes.count, capacity - 1)
        withUnsafeMutableBytes(of: &address.sun_path) { out in
            for i in 0..<count { out[i] = bytes[i] }
        }
        // An abstract name is exactly its bytes; a path ends at its NUL.
        let length = socklen_t(MemoryLayout<sa_family_t>.size + count + (abstract ? 0 : 1))
        return withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { body($0, length) }
        }
    }
}
