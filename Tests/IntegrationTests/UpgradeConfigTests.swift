import Foundation
import PluginProtocol
import SupervisorClient
import Testing

/// An upgrade in place and the config file (`--config`): the next binary reads the file again, so a
/// file that cannot be used any more must not end the supervisor and its plugins.
extension UpgradeTests {
    @Test("the config file broken on disk, then an upgrade: refused before the exec, naming the file and the fault; the supervisor serves on, every worker kept; fixed, the upgrade goes through")
    func aBrokenConfigFileRefusesTheUpgrade() async throws {
        let w = try TestWorld()
        try w.bundle("u.a")
        let config = try w.config(#"{"restartLimit": 4}"#)
        let sup = try RunningSupervisor(w, args: ["--config", config])
        let pid = try #require(try sup.plugin("u.a").pid)
        try #"{"restartLimit": "#.write(toFile: config, atomically: true, encoding: .utf8)
        let r = try sup.cli("upgrade")
        #expect(r.code != 0 && r.err.contains(config) && r.err.contains("not a valid config"), "\(r.out)\(r.err)")
        #expect(sup.process.isRunning)
        #expect(try sup.plugin("u.a").pid == pid)
        #expect(try sup.call("u.a", "ping", as: Int.self) == 1)
        try #"{"restartLimit": 4}"#.write(toFile: config, atomically: true, encoding: .utf8)
        let fixed = try sup.cli("upgrade")
        #expect(fixed.code == 0, "\(fixed.out)\(fixed.err)")
        #expect(try sup.plugin("u.a").pid == pid)
    }

    @Test("the config file broken between the checks and the exec (the new binary breaks it, then cannot read it): the previous binary comes back with the settings it ran with, and says so; every worker kept")
    func aRescueCarriesOnWithTheSettingsItHad() async throws {
        let w = try TestWorld()
        try w.bundle("u.a")
        let config = try w.config(#"{"restartLimit": 4}"#)
        let sup = try RunningSupervisor(w, args: ["--config", config])
        let pid = try #require(try sup.plugin("u.a").pid)
        // Passes both probes, then breaks the file as it is exec'd in place of the supervisor.
        let wrapper = w.root + "/breaks-the-config"
        try """
            #!/bin/sh
            if [ "$1" != upgrade-probe ] && [ -z "$SP_UPGRADE_START_PROBE" ]; then printf '{' > '\(config)'; fi
            exec '\(Build.supervisor)' "$@"

            """.write(toFile: wrapper, atomically: true, encoding: .utf8)
        chmod(wrapper, 0o755)
        let r = try sup.cli("upgrade", "--binary", wrapper)
        #expect(r.code != 0 && r.err.contains("config"), "\(r.out)\(r.err)")
        try sup.waitUntil("the rescued binary to say it keeps its settings") { sup.log.contains("carries on with the settings it ran with") }
        #expect(sup.process.isRunning)
        #expect(try sup.plugin("u.a").pid == pid)
        #expect(try sup.call("u.a", "ping", as: Int.self) == 1)
    }
}
