#if canImport(Glibc)
import Glibc
#endif
import Protocol
import Testing

/// Where a supervisor's home is when nothing names it (SPEC §6).
@Suite struct SupervisorLocationTests {
    /// This user's home as the password database has it.
    static var passwdHome: String { String(cString: getpwuid(getuid())!.pointee.pw_dir) }

    @Test func theEnvironmentNamesItFirst() {
        #expect(SupervisorLocation.defaultHome(environment: ["SUPERVISOR_HOME": "/srv/p", "HOME": "/h"]) == "/srv/p")
        #expect(SupervisorLocation.defaultHome(environment: ["XDG_DATA_HOME": "/x", "HOME": "/h"]) == "/x/sandboxed-plugins")
        #expect(SupervisorLocation.defaultHome(environment: ["HOME": "/h"]) == "/h/.local/share/sandboxed-plugins")
    }

    /// Without `HOME` (cron, `env -i`), the user's home from the password database: never `/tmp`,
    /// where another user could make the folder first.
    @Test func withoutHOMEThePasswordDatabasesHome() {
        let expected = (Self.passwdHome == "/" ? "" : Self.passwdHome) + "/.local/share/sandboxed-plugins"
        #expect(SupervisorLocation.defaultHome(environment: [:]) == expected)
        #expect(SupervisorLocation.defaultHome(environment: ["HOME": ""]) == expected)
        #expect(!SupervisorLocation.defaultHome(environment: [:]).hasPrefix("/tmp"))
    }
}
