import Foundation
import Testing
import SupervisorCore

/// The upgrade's snapshot as a value (Upgrade/UpgradeSnapshot.swift): what one binary writes and
/// the next reads, round-tripped, and the descriptors it names.
@Suite struct UpgradeSnapshotValueTests {
    static func sample() -> UpgradeSnapshot {
        let worker = UpgradeSnapshot.Worker(pid: 100, pidfd: 10, socket: 11, leftover: [0, 0, 0, 1, 0x7B], descriptorChannel: 12, payloadChannel: 13,
                                            stdout: 14, stderr: 15, temporaryFolder: "/h/tmp/a", bundle: "/p/a", version: "1.0.0", forked: true,
                                            sandbox: ["seccomp"], sandboxMissing: [], timings: ["helloUs": 900], ageNs: 5_000_000, nextID: 42,
                                            linkedCallees: ["b"], idempotent: ["echo"], taken: 40, linkMarks: true)
        let plugins = [UpgradeSnapshot.Plugin(identifier: "a", phase: .running, restarts: 2, restartAgesNs: [1_000, 2_000], hasRun: true,
                                              lastExit: ExitStatus(signal: "SIGSEGV", reason: .signaled), sandboxDenials: ["ptrace": 1], worker: worker),
                       UpgradeSnapshot.Plugin(identifier: "b", phase: .failed, restarts: 0, hasRun: false, problem: "no library", sandboxDenials: [:]),
                       UpgradeSnapshot.Plugin(identifier: "c", phase: .restarting, restarts: 2, hasRun: true, sandboxDenials: [:], restartInNs: 1_500_000_000)]
        let handoff = UpgradeSnapshot.Handoff(listener: 20, offers: [.init(token: "t", fd: 21, tag: 1, until: 9)], deposits: [])
        return UpgradeSnapshot(fromVersion: "0.4.0", pausedAtNs: 1, upgrades: 1, homeLock: 3, controlListener: 4, handoff: handoff,
                               oldForkServer: .init(pid: 5, pidfd: 22), cgroupsMissing: "", systemdReady: true, launched: true, plugins: plugins,
                               connections: [.init(fd: 30, leftover: [], following: [.init(id: 1, plugin: "a")], provides: ["greet"], nextHostCallID: 3)],
                               links: [.init(number: 7, callee: "a", callerPlugin: "b", markSlot: 3, witness: 32)], nextLinkNumber: 8, notifier: [.init(pid: 100, fd: 31, isListener: true)],
                               signals: [15, 1])
    }

    @Test func itRoundTripsAsJSON() throws {
        let snapshot = Self.sample()
        let bytes = try JSONEncoder().encode(snapshot)
        let back = try JSONDecoder().decode(UpgradeSnapshot.self, from: bytes)
        #expect(back.format == UpgradeSnapshot.format)
        #expect(back.plugins.map(\.identifier) == ["a", "b", "c"])
        #expect(back.plugins[2].restartInNs == 1_500_000_000 && back.plugins[0].restartInNs == nil)
        #expect(back.plugins[0].worker?.nextID == 42 && back.plugins[0].restartAgesNs == [1_000, 2_000])
        #expect(back.plugins[0].worker?.idempotent == ["echo"])
        #expect(back.plugins[0].worker?.taken == 40 && back.plugins[0].worker?.linkMarks == true)
        #expect(back.links.first?.markSlot == 3 && back.links.first?.witness == 32)
        #expect(back.plugins[0].lastExit == ExitStatus(signal: "SIGSEGV", reason: .signaled))
        #expect(back.links.first?.callerPlugin == "b" && back.connections.first?.following.first?.plugin == "a")
        #expect(back.descriptors == snapshot.descriptors)
        #expect(back.signals == [15, 1], "the signals that came during the handover, in order")
    }

    @Test("a worker written by a binary that kept no idempotent methods of its hello reads as none kept")
    func idempotentAbsent() throws {
        var json = try #require(try JSONSerialization.jsonObject(with: JSONEncoder().encode(Self.sample())) as? [String: Any])
        var plugins = try #require(json["plugins"] as? [[String: Any]])
        var worker = try #require(plugins[0]["worker"] as? [String: Any])
        worker["idempotent"] = nil
        plugins[0]["worker"] = worker
        json["plugins"] = plugins
        let back = try JSONDecoder().decode(UpgradeSnapshot.self, from: JSONSerialization.data(withJSONObject: json))
        #expect(back.plugins[0].worker != nil && back.plugins[0].worker?.idempotent == nil)
    }

    @Test func itNamesEveryDescriptorItKeptOpen() {
        let all = Self.sample().descriptors
        #expect(Set(all) == [3, 4, 20, 22, 21, 10, 11, 12, 13, 14, 15, 30, 31, 32])
        #expect(all.count == Set(all).count, "each once")
    }

    @Test func aFormatItCannotReadIsKnownBeforeAnythingElse() {
        #expect(UpgradeSnapshot.readable.contains(UpgradeSnapshot.format))
        #expect(!UpgradeSnapshot.readable.contains(UpgradeSnapshot.format + 1))
    }

    @Test("every plugin phase is written as the strings of format 1 and read back as the phase the new binary gives it; a name it does not know starts the plugin")
    func phases() throws {
        typealias Phase = UpgradeSnapshot.Phase
        let written: [(PluginPhase, Bool, Phase)] = [(.running, true, .running), (.running, false, .restarting), (.failed(byDependency: false), false, .failed),
                                                     (.failed(byDependency: true), false, .failedByDependency), (.stopped, false, .stopped),
                                                     (.inactive, false, .inactive), (.restarting, false, .restarting), (.waiting, false, .restarting),
                                                     (.starting, false, .restarting)]
        for (phase, hasWorker, expected) in written {
            #expect(Phase(phase, hasWorker: hasWorker) == expected, "\(phase)")
        }
        #expect(Phase.allCases.map(\.rawValue) == ["running", "failed", "failedByDependency", "stopped", "inactive", "restarting"])
        #expect(Phase.failedByDependency.restored == .failed(byDependency: true) && Phase.inactive.restored == .inactive)
        #expect(Phase.running.restored == nil && Phase.restarting.restored == nil)
        let read = try JSONDecoder().decode([Phase].self, from: Data(#"["stopped","paused"]"#.utf8))
        #expect(read == [.stopped, .restarting])
        #expect(String(decoding: try JSONEncoder().encode([Phase.failedByDependency]), as: UTF8.self) == #"["failedByDependency"]"#)
    }
}
