#if canImport(Glibc)
import Glibc
#endif
import LinuxSupport
import PluginProtocol
import Protocol
import Testing
import SupervisorCore
@testable import SupervisorKit

/// The upgrade's snapshot (Upgrade/UpgradeSnapshot.swift): what one binary writes, the next reads,
/// and a format it does not know it refuses with the reason (the previous binary then carries on).
@Suite struct UpgradeSnapshotTests {
    static func sample() -> UpgradeSnapshot {
        let worker = UpgradeSnapshot.Worker(
            pid: 100, pidfd: 10, socket: 11, leftover: [0, 0, 0, 9, 0x7B], descriptorChannel: 12, payloadChannel: 13, stdout: 14, stderr: 15,
            cgroup: ["memory": "/sys/fs/cgroup/memory/sp/a-1"], cgroupVersion: "v1", temporaryFolder: "/h/tmp/a", bundle: "/p/a", version: "1.0.0",
            library: "/p/a/liba.so", variant: nil, forked: true, startProblem: nil, sandbox: ["seccomp"], sandboxMissing: [], timings: ["helloUs": 900],
            ageNs: 5_000_000, nextID: 42, linkedCallees: ["b"])
        return UpgradeSnapshot(
            fromVersion: "0.4.0", pausedAtNs: 1, upgrades: 2, homeLock: 3, controlListener: 4, metricsListener: nil,
            handoff: .init(listener: 5, offers: [.init(token: "t", fd: 6, tag: 1, until: 9)], deposits: []),
            oldForkServer: .init(pid: 99, pidfd: 7), cgroupTree: .init(version: "v2", bases: ["": "/sys/fs/cgroup/x/sandboxed-plugins-1"]),
            cgroupsMissing: "", systemdReady: true, launched: true, requester: .init(connection: 0, id: 8),
            plugins: [.init(identifier: "a", phase: .running, restarts: 1, hasRun: true, problem: nil, lastError: "x", lastExit: nil,
                            sandboxDenials: ["ptrace": 1], worker: worker)],
            connections: [.init(fd: 20, leftover: [], following: [.init(id: 3, plugin: "a")], provides: ["m"], nextHostCallID: 4)],
            links: [.init(number: 1, callee: "a", callerConnection: 0)], nextLinkNumber: 1,
            notifier: [.init(pid: 100, fd: 21, isListener: true)])
    }

    @Test("a snapshot round-trips, names every descriptor it hands over once, and carries its format")
    func roundTrip() throws {
        let snapshot = Self.sample()
        let bytes = try ProtocolJSON.encode(snapshot)
        let read = try UpgradeHandover.decode(bytes)
        #expect(read.format == UpgradeSnapshot.format)
        #expect(read.plugins.first?.worker?.leftover == [0, 0, 0, 9, 0x7B])
        #expect(read.connections.first?.following.first?.plugin == "a")
        #expect(read.requester?.id == 8 && read.links.first?.callerConnection == 0)
        let fds = read.descriptors
        #expect(Set(fds) == [3, 4, 5, 6, 7, 10, 11, 12, 13, 14, 15, 20, 21])
        #expect(Set(fds).count == fds.count)
    }

    @Test("a format this binary does not read, bytes that are not a snapshot, or a snapshot missing members are refused, naming why")
    func refusals() throws {
        var future = Self.sample()
        future.format = 99
        let newer = try ProtocolJSON.encode(future)
        #expect(throws: UpgradeHandover.Refused.self) { try UpgradeHandover.decode(newer) }
        do { _ = try UpgradeHandover.decode(newer) } catch {
            #expect(error.description.contains("format is 99") && error.description.contains("reads 1...1"))
        }
        #expect(throws: UpgradeHandover.Refused.self) { try UpgradeHandover.decode(Array("not json".utf8)) }
        #expect(throws: UpgradeHandover.Refused.self) { try UpgradeHandover.decode(Array(#"{"format":1}"#.utf8)) }
    }

    @Test("the probe's answer names this build's version and the formats it reads")
    func probeAnswer() throws {
        struct Answer: Decodable { var version: String; var snapshotFormats: [Int] }
        let answer = try ProtocolJSON.decode(Answer.self, from: Array(UpgradeHandover.probeAnswer.utf8))
        #expect(answer.version == ProductVersion.current && answer.snapshotFormats.contains(UpgradeSnapshot.format))
    }
}
