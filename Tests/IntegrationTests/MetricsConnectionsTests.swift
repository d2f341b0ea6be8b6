import Foundation
import IPC
import SupervisorClient
import Testing

/// The metrics endpoint cannot be used to hold the supervisor's descriptors: at most 64 connections
/// at once, and one that sends nothing for 10 s is closed.
@Suite(.serialized, .timeLimit(.minutes(2)))
struct MetricsConnectionsTests {
    /// A TCP connection to 127.0.0.1:`port` that sent `text`.
    static func connect(_ port: Int, sending text: String) throws -> Int32 {
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        guard fd >= 0 else { throw HarnessError("socket: \(String(cString: strerror(errno)))") }
        var addr = sockaddr_in()
        addr.sin_family = sa_family_t(AF_INET)
        addr.sin_addr.s_addr = inet_addr("127.0.0.1")
        addr.sin_port = UInt16(port).bigEndian
        let connected = withUnsafePointer(to: &addr) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { Glibc.connect(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) } }
        guard connected == 0 else {
            let e = errno
            close(fd)
            throw HarnessError("connect: \(String(cString: strerror(e)))")
        }
        _ = text.withCString { send(fd, $0, strlen($0), 0) }
        return fd
    }

    /// Whether the peer has closed `fd` (a read gives end of file) within `seconds`.
    static func closed(_ fd: Int32, within seconds: Int) -> Bool {
        var timeout = timeval(tv_sec: seconds, tv_usec: 0)
        setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
        var byte: UInt8 = 0
        while true {
            let n = recv(fd, &byte, 1, 0)
            if n == 0 { return true }
            if n < 0 { return errno == ECONNRESET }
        }
    }

    @Test("connections held open on the metrics endpoint: past 64 the one longest without a whole request is closed, a request trickled a line at a time or none at all is closed after 10 s, and scrapes and the control socket go on")
    func heldConnections() throws {
        let w = try TestWorld()
        try w.bundle("m.one")
        let port = try freeLocalPort()
        let config = try w.config(#"{"metrics": {"listen": "127.0.0.1:\#(port)"}}"#)
        let sv = try RunningSupervisor(w, args: ["--config", config])
        // A request never finished: what a client that holds the connection sends.
        let held = try (0..<64).map { _ in try Self.connect(port, sending: "GET /metrics HTTP/1.1\r\n") }
        defer { held.forEach { close($0) } }
        // The 65th takes the place of the oldest, which is closed.
        let extra = try Self.connect(port, sending: "GET /metrics HTTP/1.1\r\n")
        defer { close(extra) }
        #expect(Self.closed(held[0], within: 5), "the oldest connection was kept past 64")
        // One of them trickles a header line a second: that is not a whole request.
        let trickling = dup(held[1])
        Thread {
            defer { close(trickling) }
            for _ in 0..<30 {
                guard send(trickling, "X-Slow: 1\r\n", 11, Int32(MSG_NOSIGNAL)) == 11 else { return }
                sleep(1)
            }
        }.start()
        #expect(try sv.cli("status").code == 0)
        #expect(try sv.call("m.one", "echo", "4", as: Int.self) == 4)
        for fd in held + [extra] { #expect(Self.closed(fd, within: 20), "a connection that sent no whole request for 10 s was kept") }
        // Room again: a scrape is served.
        try sv.waitUntil("a scrape to be served") {
            let fd = try Self.connect(port, sending: "GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            defer { close(fd) }
            var buffer = [UInt8](repeating: 0, count: 64)
            var timeout = timeval(tv_sec: 5, tv_usec: 0)
            setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
            let n = recv(fd, &buffer, buffer.count, 0)
            return n > 0 && String(decoding: buffer.prefix(n), as: UTF8.self).hasPrefix("HTTP/1.1 200")
        }
    }
}

extension MetricsConnectionsTests {
    @Test("a client that pipelines scrapes and reads no answer is answered no faster than it reads: the supervisor's memory stays put")
    func pipelinedScrapesUnread() throws {
        let w = try TestWorld()
        try w.bundle("m.two")
        let port = try freeLocalPort()
        let config = try w.config(#"{"metrics": {"listen": "127.0.0.1:\#(port)"}}"#)
        let sv = try RunningSupervisor(w, args: ["--config", config])
        func rssKiB() -> Int {
            let status = (try? String(contentsOfFile: "/proc/\(sv.pid)/status", encoding: .utf8)) ?? ""
            return status.split(separator: "\n").first { $0.hasPrefix("VmRSS:") }.flatMap { Int($0.split(separator: " ")[1]) } ?? 0
        }
        let before = rssKiB()
        let fd = try Self.connect(port, sending: "")
        defer { close(fd) }
        var timeout = timeval(tv_sec: 1, tv_usec: 0)
        setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
        let request = Array(String(repeating: "GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n", count: 1_000).utf8)
        var sent = 0
        // Until the socket takes no more (the supervisor stopped reading), or 50,000 requests.
        while sent < 50 * request.count {
            let n = request.withUnsafeBytes { send(fd, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }
            guard n > 0 else { break }
            sent += n
        }
        // Each scrape is ~2 KB or more: had every one been answered, that is tens of MiB at least.
        #expect(rssKiB() - before < 16 * 1024, "RSS grew from \(before) KiB to \(rssKiB()) KiB")
        #expect(try sv.cli("status").code == 0)
    }

    @Test("a request in the absolute form (GET http://host:port/metrics) is served as /metrics")
    func absoluteForm() throws {
        let w = try TestWorld()
        try w.bundle("m.three")
        let port = try freeLocalPort()
        let config = try w.config(#"{"metrics": {"listen": "127.0.0.1:\#(port)"}}"#)
        let sv = try RunningSupervisor(w, args: ["--config", config])
        defer { withExtendedLifetime(sv) {} }
        let fd = try Self.connect(port, sending: "GET http://127.0.0.1:\(port)/metrics?x=1 HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        defer { close(fd) }
        var buffer = [UInt8](repeating: 0, count: 64)
        var timeout = timeval(tv_sec: 5, tv_usec: 0)
        setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
        let n = recv(fd, &buffer, buffer.count, 0)
        #expect(n > 0 && String(decoding: buffer.prefix(max(n, 0)), as: UTF8.self).hasPrefix("HTTP/1.1 200"))
    }
}

/// A supervisor out of descriptors, with connections waiting in a listener's backlog: `accept`
/// fails (EMFILE) and the listener stays readable. It waits between tries, says so once, and
/// serves again when descriptors come back; it spun on `accept4` (thousands a second, a core).
@Suite(.serialized, .timeLimit(.minutes(2)))
struct AcceptBackoffTests {
    /// CPU seconds `pid` has used (user and system).
    static func cpuSeconds(_ pid: pid_t) -> Double {
        guard let text = try? String(contentsOfFile: "/proc/\(pid)/stat", encoding: .utf8),
              let close = text.lastIndex(of: ")") else { return 0 }
        let fields = text[text.index(after: close)...].split(separator: " ")
        // utime and stime, the 14th and 15th fields (the 3rd, the state, is the first after ')').
        return ((Double(fields[11]) ?? 0) + (Double(fields[12]) ?? 0)) / Double(sysconf(Int32(_SC_CLK_TCK)))
    }

    @Test("out of descriptors with clients waiting to be accepted: no spin, one warning naming the limit, served again once descriptors come back (the control socket, and the links' handoff socket, which stopped for good)")
    func noSpinOutOfDescriptors() async throws {
        let w = try TestWorld()
        try w.bundle("a.one")
        let sv = try RunningSupervisor(w)
        let open = try FileManager.default.contentsOfDirectory(atPath: "/proc/\(sv.pid)/fd").count
        // util-linux's prlimit: the call is not in Swift's Glibc module.
        let was = try Shell.run("/usr/bin/prlimit", ["--pid", "\(sv.pid)", "--nofile", "--output", "SOFT", "--noheadings"]).out
            .trimmingCharacters(in: .whitespacesAndNewlines)
        #expect(try Shell.run("/usr/bin/prlimit", ["--pid", "\(sv.pid)", "--nofile=\(open + 2):"]).code == 0)
        var clients: [BlockingConnection] = []
        defer { clients.forEach { $0.close() } }
        for _ in 0..<8 { if let c = try? BlockingConnection.connect(path: sv.socket) { clients.append(c) } }
        for _ in 0..<4 { if let c = try? BlockingConnection.connect(path: sv.socket + ".links") { clients.append(c) } }
        try sv.waitUntil("the warning") { sv.log.contains("the control socket cannot accept a connection: Too many open files") }
        let before = Self.cpuSeconds(sv.pid)
        usleep(1_000_000)
        let spent = Self.cpuSeconds(sv.pid) - before
        #expect(spent < 0.3, "the supervisor spent \(spent) s of CPU in 1 s with clients it could not accept")
        #expect(sv.log.contains("raise its open-files limit"), "\(sv.log)")
        #expect(try Shell.run("/usr/bin/prlimit", ["--pid", "\(sv.pid)", "--nofile=\(was):"]).code == 0, "soft limit was \(was)")
        clients.forEach { $0.close() }
        clients = []
        #expect(try sv.call("a.one", "ping", as: Int.self) == 1)
        // A client's direct link is picked up at the handoff socket, which serves again.
        let client = try await SupervisorClient.connect(socket: sv.socket)
        defer { client.close() }
        try await waitUntil("a direct link") { _ = try await client.call("a.one", "ping", as: Int.self); return client.linkedPlugins == ["a.one"] }
    }
}
