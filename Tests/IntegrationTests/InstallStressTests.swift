import Foundation
import IPC
import PluginProtocol
import Testing

/// Catalog loads and installs (on the supervisor's install queue) while the event loop routes calls
/// and restarts a plugin: the thread-sanitizer run (`./scripts/test.sh --tsan`) exists to watch the
/// supervisor's threads meet here, and the assertions say what a user sees meanwhile.
extension InstallTests {
    /// Runs `body` (a CLI command) over and over until told to stop, at least `minimum` times and
    /// at most `maximum`; `check` says what is wrong with a result, or nil.
    static func repeater(minimum: Int, maximum: Int, _ tally: Tally, _ body: @escaping @Sendable () throws -> Shell.Result,
                         check: @escaping @Sendable (Shell.Result) -> String?) -> Thread {
        Thread {
            var n = 0
            while n < maximum && (n < minimum || !tally.stopped) {
                n += 1
                do {
                    let r = try body()
                    if let problem = check(r) { tally.add(failure: problem) } else { tally.add(ok: true) }
                } catch {
                    tally.add(failure: "\(error)")
                }
            }
        }
    }

    @Test("catalog loads, an on-demand install, an install and updates while calls flow and another plugin restarts",
          .timeLimit(.minutes(1)))
    func installsDuringCallsAndRestarts() throws {
        let w = try TestWorld()
        let shop = try Shop(w)
        let home = w.home + "/plugins"
        try FileManager.default.createDirectory(atPath: home, withIntermediateDirectories: true)
        for id in ["st.healthy", "st.restarted", "st.app"] { try w.bundle(id, in: home) }
        let app2 = try shop.archive("st.app", "2.0.0")
        let lazy = try shop.archive("st.lazy", "1.0.0")
        let extra1 = try shop.archive("st.extra", "1.0.0")
        let extra2 = try shop.archive("st.extra", "1.1.0", kind: "zip")
        try shop.offer("st.app", "2.0.0", archive: app2)
        try shop.offer("st.lazy", "1.0.0", archive: lazy, onDemand: true)
        let sv = try start(w, config: try shop.config())
        let healthyPID = try sv.plugin("st.healthy").pid
        let started = Date()

        // Background: calls to a plugin nothing touches (SPEC §8: nothing else stops, so every one
        // succeeds), calls to the plugin being restarted, restarts of it, and catalog checks.
        let socket = sv.socket
        let healthy = Tally(), toRestarted = Tally(), restarts = Tally(), checks = Tally()
        let threads = [
            echoCaller(socket, "st.healthy", unavailableAllowed: false, healthy),
            // SPEC §8: a call to a plugin that is being restarted waits for it (or is answered by the
            // worker it reached, which drains before it ends): every one is answered.
            echoCaller(socket, "st.restarted", unavailableAllowed: false, toRestarted),
            Self.repeater(minimum: 2, maximum: 20, restarts, { try sv.cli("restart", "st.restarted") }) { r in
                r.code == 0 && r.out.contains("\"state\":\"running\"") ? nil : "restart: \(r.code) \(r.out) \(r.err)"
            },
            Self.repeater(minimum: 2, maximum: 40, checks, { try sv.cli("update", "--check") }) { r in
                r.code == 0 && r.out.contains("\"catalog\"") ? nil : "update --check: \(r.code) \(r.out) \(r.err)"
            },
        ]
        threads.forEach { $0.start() }

        // Foreground: a call installs st.lazy on demand, st.extra is installed then replaced by a newer
        // version, and `update` brings st.app to the catalog's 2.0.0.
        let onDemand = try sv.cli("call", "st.lazy", "echo", "7")
        #expect(onDemand.code == 0 && onDemand.out.trimmingCharacters(in: .whitespacesAndNewlines) == "7", "\(onDemand.err)")
        let first = try sv.cli("install", shop.dir + "/" + extra1)
        #expect(first.code == 0, "\(first.err)")
        let newer = try sv.cli("install", shop.server.base + "/" + extra2)
        #expect(newer.code == 0, "\(newer.err)")
        #expect(newer.out.contains("st.extra 1.1.0 (was 1.0.0)"), "\(newer.out)")
        let update = try sv.cli("update")
        #expect(update.code == 0, "\(update.err)")
        #expect(update.out.contains("st.app 2.0.0 (was 1.0.0)"), "\(update.out)")

        for tally in [healthy, toRestarted, restarts, checks] { tally.finish() }
        try sv.waitUntil(timeout: 20, "the background clients to finish") { threads.allSatisfy(\.isFinished) }
        let (h, r, rs, c) = (healthy.seen, toRestarted.seen, restarts.seen, checks.seen)
        print("install stress: \(String(format: "%.1f", Date().timeIntervalSince(started))) s; \(h.ok) calls to st.healthy, "
              + "\(r.ok) calls to st.restarted, \(rs.ok) restarts, \(c.ok) catalog checks")

        #expect(h.failures.isEmpty, "\(h.failures.prefix(3))")
        #expect(h.ok > 0)
        #expect(r.failures.isEmpty, "\(r.failures.prefix(3))")
        #expect(r.ok > 0)
        #expect(rs.failures.isEmpty, "\(rs.failures.prefix(3))")
        #expect(c.failures.isEmpty, "\(c.failures.prefix(3))")
        #expect(rs.ok >= 2 && c.ok >= 2)

        // Status ends consistent: everything runs, at the versions on disk, each restart counted once,
        // the untouched plugin never restarted, nothing left in staging.
        let status = try sv.status()
        let versions = Dictionary(uniqueKeysWithValues: status.map { ($0.identifier, $0.version) })
        #expect(versions == ["st.healthy": "1.0.0", "st.restarted": "1.0.0", "st.app": "2.0.0", "st.lazy": "1.0.0", "st.extra": "1.1.0"])
        #expect(w.installed() == versions)
        for p in status { #expect(p.state == "running", "\(p.identifier) is \(p.state)") }
        let restarted = try sv.plugin("st.restarted")
        #expect(restarted.restarts == rs.ok, "\(restarted.restarts) restarts counted, \(rs.ok) done")
        let untouched = try sv.plugin("st.healthy")
        #expect(untouched.restarts == 0 && untouched.pid == healthyPID)
        // Previous versions are kept for the update grace period (1 s in the shop's config), then go.
        try sv.waitUntil("staging empty after the grace period") { (try FileManager.default.contentsOfDirectory(atPath: w.home + "/staging")).isEmpty }
        #expect(try shop.server.count("/" + lazy) == 1)
    }
}
