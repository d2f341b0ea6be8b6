import Foundation
import Testing

/// A host program's executable started with a role it was not given by its supervisor
/// (Sources/CProcessRoles: SP_PROCESS_ROLE, SP_FORKSERVER_LIBRARY): it ends at once with a line
/// that names what is missing, runs none of the program's code and none of a plugin's, and a role
/// it does not know leaves it the program it is. `host-hello` is such a program (it links
/// PluginHost).
@Suite struct ProcessRoleTests {
    static var program: String { Build.dir + "/host-hello" }

    /// The environment of this test process without the roles' variables, plus `extra`.
    static func environment(_ extra: [String: String]) -> [String: String] {
        var env = ProcessInfo.processInfo.environment
        for name in ["SP_PROCESS_ROLE", "SP_FORKSERVER_LIBRARY", "SP_FORKSERVER_PARENT", "SP_WORKER_SPEC"] { env[name] = nil }
        return env.merging(extra) { $1 }
    }

    @Test("the worker's role with no spec, or a spec that is not one, ends naming SP_WORKER_SPEC")
    func workerRoleWithoutASpec() throws {
        let none = try Shell.run(Self.program, ["/nonexistent"], env: Self.environment(["SP_PROCESS_ROLE": "worker"]), timeout: 20)
        #expect(none.code != 0)
        #expect(none.err.contains("SP_WORKER_SPEC is not set; this program is started by the supervisor"), "stderr: \(none.err)")
        #expect(none.out.isEmpty, "the program's own main ran: \(none.out)")
        let bad = try Shell.run(Self.program, ["/nonexistent"], env: Self.environment(["SP_PROCESS_ROLE": "worker", "SP_WORKER_SPEC": "{\"identifier\":"]), timeout: 20)
        #expect(bad.code != 0)
        #expect(bad.err.contains("invalid SP_WORKER_SPEC"), "stderr: \(bad.err)")
    }

    @Test("the fork server's role for another parent, or without one, ends naming SP_FORKSERVER_PARENT")
    func forkServerRoleForAnotherParent() throws {
        let other = try Shell.run(Self.program, [], env: Self.environment(["SP_FORKSERVER_LIBRARY": "@program", "SP_FORKSERVER_PARENT": "1"]), timeout: 20)
        #expect(other.code == 64)
        #expect(other.err.contains("SP_FORKSERVER_PARENT is 1, but this process's parent is"), "stderr: \(other.err)")
        // Without a parent the role is not taken at all: the program runs as itself (here it finds
        // no plugin folder and ends with its own error, not the fork server's).
        let alone = try Shell.run(Self.program, ["/nonexistent"], env: Self.environment(["SP_FORKSERVER_LIBRARY": "@program"]), timeout: 30)
        #expect(!alone.err.contains("plugin-forkserver"), "stderr: \(alone.err)")
    }

    @Test("a role it does not know leaves the program as it is")
    func unknownRole() throws {
        let run = try Shell.run(Self.program, ["/nonexistent"], env: Self.environment(["SP_PROCESS_ROLE": "installer"]), timeout: 30)
        #expect(!run.err.contains("plugin-worker:") && !run.err.contains("plugin-forkserver:"), "stderr: \(run.err)")
        #expect(run.err.contains("nonexistent") || run.out.contains("nonexistent") || run.code != 0,
                "the program's own main ran and met the missing folder: \(run.code) \(run.out) \(run.err)")
    }
}
