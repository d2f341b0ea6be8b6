import Testing
import SupervisorCore

/// Whether a version may be swapped in among the installed plugins (Installing/InstallVerdict.swift).
@Suite struct InstallVerdictTests {
    static func manifest(_ id: String, _ version: String = "1.0.0", _ dependencies: [(String, String?)] = []) -> Manifest {
        let deps = dependencies.map { id, range in range.map { #"{"id": "\#(id)", "version": "\#($0)"}"# } ?? #""\#(id)""# }
        let json = #"{"identifier": "\#(id)", "version": "\#(version)", "library": "lib.so", "dependencies": [\#(deps.joined(separator: ", "))]}"#
        return try! Manifest.parse(Array(json.utf8), bundle: "/plugins/\(id)", file: "/plugins/\(id)/plugin.json")
    }

    @Test func aPluginWithWhatItNeedsIsAllowed() {
        #expect(InstallVerdict.judge(Self.manifest("a"), installed: []) == .allowed)
        #expect(InstallVerdict.judge(Self.manifest("b", "1.0.0", [("a", ">=1.0.0 <2.0.0")]), installed: [Self.manifest("a", "1.2.0")]) == .allowed)
        // An update of a plugin replaces its installed version.
        #expect(InstallVerdict.judge(Self.manifest("a", "1.3.0"), installed: [Self.manifest("a", "1.2.0"), Self.manifest("b", "1.0.0", [("a", ">=1.0.0 <2.0.0")])]) == .allowed)
    }

    @Test func aVersionThatCannotStartIsRefusedWithWhy() {
        let missing = InstallVerdict.judge(Self.manifest("b", "1.0.0", [("a", nil)]), installed: [])
        #expect(missing.refusal("b 1.0.0") == "b 1.0.0 cannot start here: /plugins/b/plugin.json: dependency a is not installed; not installed")
        let outOfRange = InstallVerdict.judge(Self.manifest("b", "1.0.0", [("a", ">=2.0.0")]), installed: [Self.manifest("a", "1.2.0")])
        guard case .cannotStart(let why) = outOfRange else { Issue.record("\(outOfRange)"); return }
        #expect(why.contains("dependency a >=2.0.0 is not met by the installed 1.2.0"))
        let cycle = InstallVerdict.judge(Self.manifest("a", "1.1.0", [("b", nil)]), installed: [Self.manifest("a"), Self.manifest("b", "1.0.0", [("a", nil)])])
        guard case .cannotStart(let loop) = cycle else { Issue.record("\(cycle)"); return }
        #expect(loop.contains("dependency cycle a → b → a"))
    }

    @Test func aVersionOutsideADependentsRangeNamesThatDependent() {
        let installed = [Self.manifest("a", "1.2.0"), Self.manifest("d", "1.0.0", [("a", ">=1.0.0 <2.0.0")]), Self.manifest("e", "1.0.0", [("d", nil)])]
        let verdict = InstallVerdict.judge(Self.manifest("a", "2.0.0"), installed: installed)
        // `d`, whose range is not met, not `e`, which only depends on `d`.
        guard case .leaves(let dependent, let problem) = verdict else { Issue.record("\(verdict)"); return }
        #expect(dependent == "d" && problem.contains("dependency a >=1.0.0 <2.0.0 is not met by the installed 2.0.0"))
        #expect(verdict.refusal("a 2.0.0")?.hasSuffix(": update or uninstall d first; not installed") == true)
    }

    @Test func aDependentThatCouldNotStartBeforeIsNoReasonToRefuse() {
        // `d` needs `x`, which is not installed: it cannot start either way.
        let installed = [Self.manifest("a", "1.2.0"), Self.manifest("d", "1.0.0", [("a", ">=1.0.0 <2.0.0"), ("x", nil)])]
        #expect(InstallVerdict.judge(Self.manifest("a", "2.0.0"), installed: installed) == .allowed)
        #expect(InstallVerdict.allowed.refusal("a 2.0.0") == nil)
    }
}
