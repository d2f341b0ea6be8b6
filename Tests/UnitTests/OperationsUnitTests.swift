import Foundation
import NIOCore
import PluginProtocol
import Testing
import LinuxSupport
@testable import SupervisorKit

/// The pure parts of SPEC §10: the traceparent reader, the JSON log line, the notify environment,
/// the metrics endpoint setting, /proc/<pid>/stat.
@Suite struct TraceparentTests {
    /// The trace id (hex) and flags `TraceParentText.parent` reads from `text`, as a JSON string.
    static func parent(_ text: String) -> (String, UInt8)? {
        var trace = [UInt8](repeating: 0, count: 16)
        var flags: UInt8 = 0
        let ok = JSONEscaping.quoted(text).withUnsafeBytes { raw in trace.withUnsafeMutableBytes { TraceParentText.parent(inJSON: raw, trace: $0, flags: &flags) } }
        return ok ? (trace.map { String($0, radix: 16).count == 1 ? "0" + String($0, radix: 16) : String($0, radix: 16) }.joined(), flags) : nil
    }

    @Test func readsAValidOne() throws {
        let p = try #require(Self.parent("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"))
        #expect(p.0 == "4bf92f3577b34da6a3ce929d0e0e4736")
        #expect(p.1 == 1)
    }

    @Test(arguments: [
        "", "00", "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-0",  // short
        "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-extra",  // version 00 is exactly 55
        "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",  // uppercase
        "00-00000000000000000000000000000000-00f067aa0ba902b7-01",  // null trace id
        "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",  // null parent id
        "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",  // version ff is invalid
        "00_4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",  // delimiter
        "00-4bf92f3577b34da6a3ce929d0e0e473g-00f067aa0ba902b7-01",  // not hex
    ])
    func refusesInvalid(_ text: String) {
        #expect(Self.parent(text) == nil, "\(text)")
    }

    @Test func laterVersionsAreReadByTheirFirst55Bytes() {
        #expect(Self.parent("01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-more") != nil)
        #expect(Self.parent("01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01xmore") == nil)
    }

    @Test func theLogShowsTheHopsIds() {
        var hop = CallHop()
        let given = JSONEscaping.quoted("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01")
        let trace = given.withUnsafeBytes { hop.nextTrace(parent: $0) }
        let logged = CallTrace(trace)
        #expect(logged.traceIDText == "4bf92f3577b34da6a3ce929d0e0e4736")
        #expect(trace.header == "00-\(logged.traceIDText)-\(logged.spanIDText)-01")
    }

    @Test func idsAreUniqueAndSeededPerProcess() {
        var pool = TraceIDGenerator()
        var seen = Set<UInt64>()
        for _ in 0..<100_000 { seen.insert(pool.next()) }
        #expect(seen.count == 100_000)
        var a = TraceIDGenerator(), b = TraceIDGenerator()
        #expect(a.next() != b.next(), "two generators seeded alike")
    }
}

@Suite struct JSONLogLineTests {
    @Test func escapesAndFlattens() throws {
        let line = JSONLogHandler.line(time: "2026-11-23T14:48:33.000001Z", level: .warning,
                                       message: "a \"quoted\"\nline\u{1}",
                                       metadata: ["plugin": "k.one", "message": "shadow", "outer": ["inner": "v"], "list": ["a", "b"]])
        let object = try #require(try JSONSerialization.jsonObject(with: Data(line)) as? [String: Any])
        #expect(object["time"] as? String == "2026-11-23T14:48:33.000001Z")
        #expect(object["level"] as? String == "warning")
        #expect(object["message"] as? String == "a \"quoted\"\nline\u{1}")
        #expect(object["plugin"] as? String == "k.one")
        #expect(object["metadata.message"] as? String == "shadow")
        #expect(object["outer.inner"] as? String == "v")
        #expect(object["list"] as? [String] == ["a", "b"])
        #expect(!line.contains(UInt8(ascii: "\n")))
    }

    @Test("each key once, sorted, the key given as it is winning over one made by flattening or by the prefix")
    func eachKeyOnceAndSorted() throws {
        let line = JSONLogHandler.line(time: "t", level: .info, message: "m",
                                       metadata: ["a.b": "x", "a": ["b": "y"], "time": "t1", "metadata.time": "t2", "z": "last"])
        let text = String(decoding: line, as: UTF8.self)
        #expect(text == #"{"time":"t","level":"info","message":"m","a.b":"x","metadata.time":"t2","z":"last"}"#, "\(text)")
    }

    @Test func timeIsRFC3339UTC() {
        let now = JSONLogHandler.now()
        #expect(now.count == 27 && now.hasSuffix("Z") && now.dropFirst(10).first == "T", "\(now)")
    }
}

@Suite struct NotifyEnvironmentTests {
    @Test func readsSocketAndWatchdog() {
        let e = SystemdNotify.Endpoint.from(environment: ["NOTIFY_SOCKET": "@abstract", "WATCHDOG_USEC": "3000000"], pid: 42)
        #expect(e?.socketPath == "@abstract")
        #expect(e?.watchdogInterval == .microseconds(1_500_000))
    }

    @Test func watchdogOnlyForItsPID() {
        #expect(SystemdNotify.Endpoint.from(environment: ["NOTIFY_SOCKET": "/run/n", "WATCHDOG_USEC": "100", "WATCHDOG_PID": "7"], pid: 42)?.watchdogInterval == nil)
        #expect(SystemdNotify.Endpoint.from(environment: ["NOTIFY_SOCKET": "/run/n", "WATCHDOG_USEC": "100", "WATCHDOG_PID": "42"], pid: 42)?.watchdogInterval != nil)
        #expect(SystemdNotify.Endpoint.from(environment: ["NOTIFY_SOCKET": "/run/n", "WATCHDOG_USEC": "zero"], pid: 42)?.watchdogInterval == nil)
        // Said at start, not passed over in silence (systemd's watchdog would kill a supervisor sending no keep-alive).
        #expect(SystemdNotify.Endpoint.from(environment: ["NOTIFY_SOCKET": "/run/n", "WATCHDOG_USEC": "zero"], pid: 42)?.unreadableWatchdog == "zero")
        #expect(SystemdNotify.Endpoint.from(environment: ["NOTIFY_SOCKET": "/run/n", "WATCHDOG_USEC": "100"], pid: 42)?.unreadableWatchdog == nil)
    }

    @Test func ignoresWhatIsNotASocketAddress() {
        #expect(SystemdNotify.Endpoint.from(environment: [:], pid: 1) == nil)
        #expect(SystemdNotify.Endpoint.from(environment: ["NOTIFY_SOCKET": "relative"], pid: 1) == nil)
        #expect(SystemdNotify.Endpoint.from(environment: ["NOTIFY_SOCKET": "@"], pid: 1) == nil)
    }
}

@Suite struct MetricsPartsTests {
    @Test func endpoints() throws {
        let e = try MetricsEndpoint("127.0.0.1:9464")
        #expect(e.host == "127.0.0.1" && e.port == 9464)
        #expect(try MetricsEndpoint("[::1]:9464").host == "::1")
        #expect(try MetricsEndpoint("localhost:1").port == 1)
        let portOnly = try MetricsEndpoint("9464")
        #expect(portOnly.host == "127.0.0.1" && portOnly.port == 9464, "a port alone is loopback")
        for bad in ["0", "70000", ":9464", "127.0.0.1:", "127.0.0.1:70000", "host.example:9464", "[::1]:x"] {
            #expect(throws: MetricsEndpoint.Invalid.self, "\(bad)") { try MetricsEndpoint(bad) }
        }
    }

    @Test func statCPU() {
        // A command name with spaces and parentheses; utime 150 and stime 50 ticks.
        let line = "1234 (a (b) c) S 1 1234 1234 0 -1 4194560 100 0 0 0 150 50 0 0 20 0 1 0 100 1000 10"
        let us = Metrics.parseStatCPU(Array(line.utf8))
        #expect(us == 200 * 1_000_000 / Metrics.ticksPerSecond)
        #expect(Metrics.parseStatCPU(Array("garbage".utf8)) == nil)
    }
}

/// The config file's new settings: metrics, the trust settings, the wait queue, how workers start.
@Suite struct NewConfigKeysTests {
    func apply(_ json: String) -> String? { apply(bytes: Array(json.utf8)) }

    func apply(bytes: [UInt8]) -> String? {
        let path = FileManager.default.temporaryDirectory.appendingPathComponent("cfg-\(UUID().uuidString).json").path
        defer { try? FileManager.default.removeItem(atPath: path) }
        try? Data(bytes).write(to: URL(fileURLWithPath: path))
        var config = SupervisorConfig(home: "/tmp/x", pluginDirectories: [], socketPath: nil)
        do { try config.apply(configFile: path); return nil } catch { return "\(error)" }
    }

    static let key = "wNiEN0gFBXJyUgeYXohL0kwsLodIiXSHjK5AagapSWU="

    @Test func accepted() throws {
        #expect(apply(#"{"trustedKeys": ["\#(Self.key)", {"key": "\#(Self.key)", "expires": "2027-01-31T00:00:00Z"}]}"#) == nil)
        #expect(apply(#"{"revokedKeys": ["\#(Self.key)"], "catalogSignatures": "optional", "callQueueLimit": 10, "drainTimeoutMs": 100}"#) == nil)
        #expect(apply(#"{"metrics": {"listen": "127.0.0.1:9464"}}"#) == nil)
        var config = SupervisorConfig(home: "/tmp/x", pluginDirectories: [], socketPath: nil)
        let path = FileManager.default.temporaryDirectory.appendingPathComponent("cfg-\(UUID().uuidString).json").path
        try #"{"trustedKeys": [{"key": "\#(Self.key)", "expires": "2027-01-31T00:00:00Z"}], "catalogSignatures": "optional"}"#
            .write(toFile: path, atomically: true, encoding: .utf8)
        try config.apply(configFile: path)
        #expect(config.trustedKeys == [Self.key] && config.keyExpiries[Self.key] == "2027-01-31T00:00:00Z" && config.catalogSignaturesOptional)
    }

    @Test func refusedWithTheReason() {
        #expect(apply(#"{"trustedKeys": [{"key": "\#(Self.key)", "expires": "next year"}]}"#)?.contains("not an RFC 3339 time") == true)
        #expect(apply(#"{"trustedKeys": [{"expires": "2027-01-31T00:00:00Z"}]}"#)?.contains("needs \"key\"") == true)
        #expect(apply(#"{"trustedKeys": [{"key": "\#(Self.key)", "until": "x"}]}"#)?.contains("unknown key 'until'") == true)
        #expect(apply(#"{"revokedKeys": ["short"]}"#)?.contains("revokedKeys") == true)
        #expect(apply(#"{"catalogSignatures": "sometimes"}"#)?.contains("must be \"required\" or \"optional\"") == true)
        #expect(apply(#"{"metrics": {"listen": ":9464"}}"#)?.contains("names no address") == true)
        #expect(apply(#"{"metrics": {"port": 9464}}"#)?.contains("unknown key 'port'") == true)
        // What is not an object is named, not shown as a decoder's type names.
        #expect(apply("[1]")?.contains("not a valid config: it holds a list of 1 item, not a JSON object of settings") == true, "\(apply("[1]") ?? "")")
        #expect(apply(#""callQueueLimit""#)?.contains(#"it holds "callQueueLimit", not a JSON object"#) == true)
        #expect(apply("{callQueueLimit: 1}")?.contains("not a valid config: not JSON") == true)
        #expect(apply("[1]")?.contains("Dictionary") == false)
        #expect(apply(#"{"callQueueLimit": 0}"#)?.contains("must be positive") == true)
        // Read as strictly as a manifest: a trailing comma, bytes that are not UTF-8, each with its place.
        #expect(apply(#"{"callTimeoutMs": 1000,}"#)?.contains("not a valid config: not valid JSON at line 1, column 24") == true, "\(apply(#"{"callTimeoutMs": 1000,}"#) ?? "")")
        let notUTF8 = Array(#"{"socket": "/tmp/a"#.utf8) + [0xFF] + Array(#""}"#.utf8)
        #expect(apply(bytes: notUTF8)?.contains("not a valid config: not valid JSON at line 1, column 19: bytes that are not UTF-8") == true, "\(apply(bytes: notUTF8) ?? "")")
        // A frame limit a worker's hello or a `stop` would not fit in.
        #expect(apply(#"{"maxFrameBytes": 64}"#)?.contains("'maxFrameBytes' is 64; it is from 1048576 (1 MiB: a worker's hello and every command must fit)") == true)
        #expect(apply(#"{"maxFrameBytes": 1048576}"#) == nil)
        #expect(apply(#"{"callTimeoutMs": 100, "callQueueLimit": 10, "callTimeoutMs": 200}"#)?
            .contains("key 'callTimeoutMs' appears twice in the top-level object") == true)
        #expect(apply(#"{"metrics": {"listen": "127.0.0.1:1", "listen": "127.0.0.1:2"}}"#)?.contains("key 'listen' appears twice in 'metrics'") == true)
        // Bounded, so that no deadline or size worked out from a setting overflows.
        #expect(apply(#"{"callTimeoutMs": 10000000000000}"#)?.contains("is 10000000000000; it is at most 86400000 (a day)") == true)
        #expect(apply(#"{"shutdownGraceMs": 9223372036854775807}"#)?.contains("it is at most 86400000 (a day)") == true)
        #expect(apply(#"{"restartLimit": 1000000}"#) == nil)
        #expect(apply(#"{"startupTimeoutMs": 1e20}"#)?.contains("a number too large for a whole number") == true)
        #expect(apply(#"{"callTimeoutMs": 1e400}"#)?.contains("got a number too large to read") == true, "\(apply(#"{"callTimeoutMs": 1e400}"#) ?? "")")
        #expect(apply(#"{"startupTimeoutMs": 1.5}"#)?.contains("the fractional number 1.5") == true)
        #expect(apply(#"{"socket": ""}"#)?.contains("'socket' is empty") == true)
        #expect(apply(#"{"plugins": ["/p", ""]}"#)?.contains("[1] is empty") == true)
        #expect(apply(#"{"catalog": ""}"#)?.contains("it is an http://, https:// or file:// URL") == true)
        #expect(apply(#"{"catalog": "ftp://x/catalog.json"}"#)?.contains("'ftp://x/catalog.json'") == true)
        #expect(apply(#"{"catalog": "https://example.com/catalog.json"}"#) == nil)
        #expect(apply(#"{"workerStart": "zygote"}"#)?.contains("\"exec\" or \"fork-server\"") == true)
        #expect(apply(#"{"workerStart": true}"#)?.contains("workerStart") == true)
        #expect(apply(#"{"workerSpinMicroseconds": 1001}"#)?.contains("from 0 (never) to 1000 microseconds") == true)
        #expect(apply(#"{"workerSpinMicroseconds": -1}"#)?.contains("workerSpinMicroseconds") == true)
        #expect(apply(#"{"workerSpinMicroseconds": "50"}"#)?.contains("must be a whole number") == true)
        #expect(apply(#"{"standbyWorkers": "sometimes"}"#)?.contains(#"it is "never", "on-crash" or "always""#) == true)
        #expect(apply(#"{"standbyWorkers": true}"#)?.contains("standbyWorkers") == true)
        // SPEC §16's settings: a choice it does not know, a time out of its range, a wrong type.
        #expect(apply(#"{"activation": "lazy"}"#)?.contains(#"it is "eager" or "onCall""#) == true)
        #expect(apply(#"{"activation": 1}"#)?.contains("activation") == true)
        #expect(apply(#"{"idleStopMs": 0}"#)?.contains("it is from 1 to 86400000 (a day) milliseconds") == true)
        #expect(apply(#"{"idleStopMs": 86400001}"#)?.contains("idleStopMs") == true)
        #expect(apply(#"{"idleStopMs": "1s"}"#)?.contains("must be a whole number") == true)
        #expect(apply(#"{"floodLogsPerSecond": 10}"#)?.contains("is 10; it must be over the 200 log messages a second") == true)
    }

    @Test func standbyWorkers() throws {
        #expect(SupervisorConfig(home: "/tmp/x").standbyWorkers == .onCrash)
        for mode in SupervisorConfig.StandbyWorkers.allCases {
            var config = SupervisorConfig(home: "/tmp/x", pluginDirectories: [], socketPath: nil)
            let path = FileManager.default.temporaryDirectory.appendingPathComponent("cfg-\(UUID().uuidString).json").path
            defer { try? FileManager.default.removeItem(atPath: path) }
            try #"{"standbyWorkers": "\#(mode.rawValue)"}"#.write(toFile: path, atomically: true, encoding: .utf8)
            try config.apply(configFile: path)
            #expect(config.standbyWorkers == mode)
        }
    }

    @Test func workerSpin() throws {
        #expect(SupervisorConfig(home: "/tmp/x").workerSpinMicroseconds == 0)
        var config = SupervisorConfig(home: "/tmp/x", pluginDirectories: [], socketPath: nil)
        let path = FileManager.default.temporaryDirectory.appendingPathComponent("cfg-\(UUID().uuidString).json").path
        defer { try? FileManager.default.removeItem(atPath: path) }
        try #"{"workerSpinMicroseconds": 100}"#.write(toFile: path, atomically: true, encoding: .utf8)
        try config.apply(configFile: path)
        #expect(config.workerSpinMicroseconds == 100)
    }

    @Test func workerStart() throws {
        #expect(SupervisorConfig(home: "/tmp/x").workerStart == .forkServer)
        for (text, mode) in [("exec", SupervisorConfig.WorkerStart.exec), ("fork-server", .forkServer)] {
            var config = SupervisorConfig(home: "/tmp/x", pluginDirectories: [], socketPath: nil)
            let path = FileManager.default.temporaryDirectory.appendingPathComponent("cfg-\(UUID().uuidString).json").path
            defer { try? FileManager.default.removeItem(atPath: path) }
            try #"{"workerStart": "\#(text)"}"#.write(toFile: path, atomically: true, encoding: .utf8)
            try config.apply(configFile: path)
            #expect(config.workerStart == mode)
        }
    }
}

/// One supervisor or offline install per home (`HomeLock`): the lock says who holds it.
@Suite struct HomeLockTests {
    @Test func theLockSaysWhatHoldsIt() throws {
        let home = NSTemporaryDirectory() + "homelock-\(UUID().uuidString.prefix(8))"
        try FileManager.default.createDirectory(atPath: home, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: home) }
        do {
            let install = try HomeLock(home: home, holder: .install)
            defer { withExtendedLifetime(install) {} }
            #expect(try String(contentsOfFile: home + "/supervisor.lock", encoding: .utf8) == "\(getpid()) install\n")
            do {
                _ = try HomeLock(home: home)
                Issue.record("a second holder took the lock")
            } catch {
                guard case .held(_, let pid, let holder) = error else { throw error }
                #expect(pid == "\(getpid())" && holder == .install)
            }
        }
        // A file an older binary wrote (its pid alone) is a supervisor's.
        try "4711\n".write(toFile: home + "/supervisor.lock", atomically: false, encoding: .utf8)
        let other = open(home + "/supervisor.lock", O_RDONLY)
        defer { close(other) }
        #expect(flock(other, LOCK_EX | LOCK_NB) == 0)
        do {
            _ = try HomeLock(home: home)
            Issue.record("the lock was taken while held")
        } catch {
            guard case .held(_, let pid, let holder) = error else { throw error }
            #expect(pid == "4711" && holder == .supervisor)
        }
    }
}

/// A home another user could change is refused (LinuxSupport/FolderTrust.swift): its plugins' data
/// folders become their workers' to write, and a link planted where one goes would lead anywhere.
@Suite struct HomeTrustTests {
    @Test func aHomeOthersCanChangeIsNamedWithWhy() throws {
        let root = NSTemporaryDirectory() + "hometrust-\(UUID().uuidString.prefix(8))"
        let home = root + "/a/home"
        try FileManager.default.createDirectory(atPath: home, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: root) }
        for folder in [root, root + "/a", home] { chmod(folder, 0o755) }
        #expect(FileSystem.writableByOthers(home) == nil)
        chmod(home, 0o777)
        #expect(FileSystem.writableByOthers(home)?.contains("is writable by every user (mode 777)") == true)
        // Group-writable: by others only when the group is not this process's own.
        chmod(home, 0o775)
        #expect(chown(home, geteuid(), getegid()) == 0)
        #expect(FileSystem.writableByOthers(home) == nil, "its group is this process's: \(FileSystem.writableByOthers(home) ?? "")")
        if geteuid() == 0 {
            #expect(chown(home, 0, 65534) == 0)
            #expect(FileSystem.writableByOthers(home)?.contains("is writable by its group (gid 65534, which this process is not in)") == true)
            #expect(chown(home, 0, 0) == 0)
        }
        chmod(home, 0o700)
        // A folder above: writable by others only with the sticky bit (as /tmp).
        chmod(root + "/a", 0o777)
        #expect(FileSystem.writableByOthers(home)?.contains("a folder above the home, is writable by every user without the sticky bit") == true)
        chmod(root + "/a", 0o1777)
        #expect(FileSystem.writableByOthers(home) == nil)
        chmod(root + "/a", 0o755)
        // Owned by another user (the test runs as root in CI; elsewhere that part is skipped).
        if geteuid() == 0 {
            #expect(chown(root + "/a", 65534, 65534) == 0)
            #expect(FileSystem.writableByOthers(home)?.contains("\(root)/a is owned by uid 65534") == true, "\(FileSystem.writableByOthers(home) ?? "nil")")
            #expect(chown(root + "/a", 0, 0) == 0)
            // A link to a home others can write is judged by where it leads.
            let link = root + "/link"
            chmod(home, 0o777)
            #expect(symlink(home, link) == 0)
            #expect(FileSystem.writableByOthers(link)?.contains("\(home) is writable by every user") == true)
            chmod(home, 0o700)
            #expect(FileSystem.writableByOthers(link) == nil)
            // A link another user owns (in a sticky folder they may put it in) could be pointed
            // elsewhere after the check, whatever it leads to now; so could a folder '..' passes.
            #expect(lchown(link, 65534, 65534) == 0)
            #expect(FileSystem.writableByOthers(link)?.contains("\(link) is a link owned by uid 65534") == true, "\(FileSystem.writableByOthers(link) ?? "nil")")
            let theirs = root + "/theirs"
            try FileManager.default.createDirectory(atPath: theirs, withIntermediateDirectories: true)
            #expect(chown(theirs, 65534, 65534) == 0)
            #expect(FileSystem.writableByOthers(theirs + "/../a/home")?.contains("\(theirs), which the path passes through with '..', is owned by uid 65534") == true)
        }
    }
}
