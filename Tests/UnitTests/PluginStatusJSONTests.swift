import Foundation
import PluginProtocol
import Protocol
import Testing

/// `status`'s answer, written directly (PluginStatusJSON.swift): the same bytes Foundation's encoder
/// writes, for every property `PluginStatus` has.
@Suite struct PluginStatusJSONTests {
    static func full() -> PluginStatus {
        var s = PluginStatus(identifier: "com.example.a", version: "1.2.3", state: "running", pid: 4711, restarts: 2,
                             lastExit: ExitStatus(code: 70, signal: "SIGKILL", reason: .sandboxViolation, syscall: "ptrace", message: "a \"quoted\"\nline \\ / é"),
                             dependencies: ["com.example.b", "com.example.c"], variant: "/plugins/a/liba.so", sandbox: ["seccomp", "landlock"],
                             sandboxMissing: ["cgroup: none here"], error: "why it is not running", timings: ["spawnUs": 12, "loadUs": 3, "sandbox.baseUs": 1, "Zeta": 9],
                             sandboxDenials: ["socket": 3, "bind": 1], lastError: "the last error", updating: .init(version: "1.3.0", pid: 4712), debug: true,
                             workerStart: "fork-server", workerStartProblem: "none", links: ["com.example.b"])
        s.supervisorVersion = "0.4.0"
        s.standbyPid = 4713
        return s
    }

    static func encoded<T: Encodable>(_ value: T) throws -> [UInt8] {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
        return Array(try encoder.encode(value))
    }

    @Test("a status with every property set, one with none of the optional ones, and a list: byte for byte what JSONEncoder writes")
    func sameBytes() throws {
        let full = Self.full()
        let bare = PluginStatus(identifier: "com.example.z", version: "0.0.1", state: "inactive", pid: nil, restarts: 0, lastExit: nil,
                                dependencies: [], variant: nil, sandbox: [], sandboxMissing: nil, error: nil)
        #expect(String(decoding: full.json(), as: UTF8.self) == String(decoding: try Self.encoded(full), as: UTF8.self))
        #expect(bare.json() == (try Self.encoded(bare)))
        // SPEC §6's keys are there for each plugin, null when there is none; the others are left out.
        #expect(String(decoding: bare.json(), as: UTF8.self)
            == #"{"dependencies":[],"identifier":"com.example.z","lastError":null,"lastExit":null,"pid":null,"restarts":0,"sandbox":[],"state":"inactive","variant":null,"version":"0.0.1"}"#)
        #expect(PluginStatus.json([full, bare, full]) == (try Self.encoded([full, bare, full])))
        #expect(PluginStatus.json([]) == Array("[]".utf8))
        #expect(try JSONDecoder().decode([PluginStatus].self, from: Data(PluginStatus.json([full, bare]))) == [full, bare])
    }

    @Test("a list whose plugins' counts have the same keys, other keys of the same number, more and fewer: each written in its own sorted order")
    func countsOrderReused() throws {
        func status(_ timings: [String: Int]?, denials: [String: Int]? = nil) -> PluginStatus {
            PluginStatus(identifier: "com.example.t", version: "1.0.0", state: "running", pid: 1, restarts: 0, lastExit: nil,
                         dependencies: [], variant: nil, sandbox: [], sandboxMissing: nil, error: nil, timings: timings, sandboxDenials: denials)
        }
        let list = [status(["b": 1, "a": 2, "c": 3]), status(["c": 4, "b": 5, "a": 6]), status(["a": 7, "b": 8, "d": 9]),
                    status(["z": 1]), status(nil), status(["b": 1, "a": 2, "c": 3, "d": 4]), status([:]), status(["d": 1, "a": 2, "c": 3, "b": 4]),
                    status(["d": 1, "a": 2, "c": 3, "b": 4], denials: ["ptrace": 1, "bpf": 2]), status(["b": 1, "a": 2, "c": 3, "d": 4], denials: [:]),
                    status(["a": 1, "b": 2], denials: ["mount": 3, "bpf": 1]), status(["a": 1, "c": 2], denials: ["bpf": 1, "mount": 3])]
        #expect(String(decoding: PluginStatus.json(list), as: UTF8.self) == String(decoding: try Self.encoded(list), as: UTF8.self))
    }

    @Test("counts' keys sort by their UTF-8 bytes, as the encoder sorts them: the same order as lexicographicallyPrecedes for ASCII, prefixes, empty and non-ASCII keys")
    func keyOrder() {
        let keys = ["", "a", "ab", "b", "B", "Zeta", "sandbox.baseUs", "sandbox.landlockUs", "é", "e\u{301}", "z", "日本", "sandbox", "ü", "~"]
        for a in keys {
            for b in keys {
                #expect(JSONWriter.precedes(a, b) == a.utf8.lexicographicallyPrecedes(b.utf8), "\(a) vs \(b)")
            }
        }
    }

    @Test("every stored property of PluginStatus is written: one added to the type and not to the writer fails here")
    func everyProperty() throws {
        let properties = Mirror(reflecting: Self.full()).children.compactMap(\.label)
        let object = try #require(try JSONSerialization.jsonObject(with: Data(Self.full().json())) as? [String: Any])
        #expect(Set(object.keys) == Set(properties), "written: \(object.keys.sorted()); properties: \(properties.sorted())")
    }

    @Test("answers kept plugin by plugin: the same bytes as a fresh answer while plugins change, come and go, and the list is asked again unchanged")
    func answersKept() throws {
        var answers = PluginStatus.Answers()
        let full = Self.full()
        var other = Self.full()
        other.identifier = "com.example.b"
        other.timings = ["spawnUs": 1]
        var lists: [[PluginStatus]] = [[full, other], [full, other], [], [other, full]]
        var restarted = other
        restarted.restarts += 1
        restarted.pid = 99
        restarted.timings?["spawnUs"] = 2
        lists.append([full, restarted])
        var stopped = full
        stopped.state = "stopped"
        stopped.pid = nil
        stopped.timings = nil
        lists += [[stopped, restarted], [stopped], [full, restarted, other], [full, restarted, other]]
        for list in lists {
            #expect(String(decoding: answers.json(list), as: UTF8.self) == String(decoding: PluginStatus.json(list), as: UTF8.self))
        }
    }
}
