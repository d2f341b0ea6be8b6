import Testing
import SupervisorCore

/// What a rescan does with each plugin (Rescanning/RescanPlan.swift), from values alone.
@Suite struct RescanPlanTests {
    static func manifest(_ id: String, _ text: String = "v1") -> Manifest {
        Manifest.unusable(bundle: "/plugins/\(id)", bytes: Array(#"{"identifier":"\#(id)","note":"\#(text)"}"#.utf8))
    }

    static func known(_ m: Manifest, installUnderWay: Bool = false) -> RescanPlan.Known {
        .init(fingerprint: m.fingerprint, bundle: m.bundle, installUnderWay: installUnderWay)
    }

    @Test func newChangedUnchangedAndRemoved() {
        let a = Self.manifest("a"), b = Self.manifest("b"), gone = Self.manifest("gone")
        let before = PluginCatalog(manifests: [a, b, gone])
        let now = PluginCatalog(manifests: [a, Self.manifest("b", "v2"), Self.manifest("c")])
        let plan = RescanPlan(known: ["a": Self.known(a), "b": Self.known(b), "gone": Self.known(gone)], before: before, now: now)
        #expect(plan.summary == ["b: restart", "c: add", "gone: remove"])
        #expect(plan.removed == ["gone"])
    }

    /// A reload while an install or update of a plugin is under way leaves that plugin to it, even
    /// if its files changed (they are the install's to change).
    @Test func aReloadDuringAnInstallLeavesThePluginToIt() {
        let a = Self.manifest("a")
        let plan = RescanPlan(known: ["a": Self.known(a, installUnderWay: true)], before: PluginCatalog(manifests: [a]),
                              now: PluginCatalog(manifests: [Self.manifest("a", "v2")]))
        #expect(plan.summary == ["a: left to its install"])
        #expect(plan.removed.isEmpty)
    }

    /// Its bundle gone from the folders because an uninstall moved it out (and stops it): the
    /// rescan leaves it to the uninstall rather than stop and forget it a second time.
    @Test func aReloadDuringAnUninstallLeavesThePluginToIt() {
        let a = Self.manifest("a")
        let plan = RescanPlan(known: ["a": Self.known(a, installUnderWay: true)], before: PluginCatalog(manifests: [a]),
                              now: PluginCatalog(manifests: []))
        #expect(plan.summary == ["a: left to its install"])
        #expect(plan.removed.isEmpty)
    }

    @Test func changedAndRefusedIsStoppedNotRestarted() {
        let a = Self.manifest("a")
        let now = PluginCatalog(manifests: [], unusable: [(Self.manifest("a", "broken"), "plugin.json: field 'version': missing")])
        let plan = RescanPlan(known: ["a": Self.known(a)], before: PluginCatalog(manifests: [a]), now: now)
        #expect(plan.summary == ["a: refuse"])
    }

    @Test func noLongerRefusedStartsAgainUntouched() {
        let a = Self.manifest("a")
        let before = PluginCatalog(manifests: [], unusable: [(a, "its bundle folder is writable by every user")])
        let plan = RescanPlan(known: ["a": Self.known(a)], before: before, now: PluginCatalog(manifests: [a]))
        #expect(plan.summary == ["a: restart (cured)"])
    }

    @Test func aNewRefusedPluginIsAddedAsRefused() {
        let plan = RescanPlan(known: [:], before: PluginCatalog(manifests: []),
                              now: PluginCatalog(manifests: [], unusable: [(Self.manifest("x"), "bad")]))
        #expect(plan.summary == ["x: add refused"])
    }

    static func real(_ id: String, _ version: String, dependsOn dependency: String? = nil) -> Manifest {
        let deps = dependency.map { #"[{"id": "\#($0)", "version": "^1.0.0"}]"# } ?? "[]"
        let json = #"{"identifier": "\#(id)", "version": "\#(version)", "library": "lib.so", "dependencies": \#(deps)}"#
        var m = try! Manifest.parse(Array(json.utf8), bundle: "/plugins/\(id)", file: "/plugins/\(id)/plugin.json")
        m.fingerprint = Array(json.utf8)
        return m
    }

    /// A running plugin whose bundle turns into one that cannot start (a save cut short) goes on
    /// with what it loaded; one that runs no worker is refused.
    @Test func aRunningPluginIsKeptWhenItsBundleBreaks() {
        let a = Self.manifest("a")
        let now = PluginCatalog(manifests: [], unusable: [(Self.manifest("a", "cut short"), "plugin.json: not valid JSON")])
        var known = Self.known(a)
        known.isRunning = true
        #expect(RescanPlan(known: ["a": known], before: PluginCatalog(manifests: [a]), now: now).summary == ["a: keep"])
        #expect(RescanPlan(known: ["a": Self.known(a)], before: PluginCatalog(manifests: [a]), now: now).summary == ["a: refuse"])
        // Refused already, and nothing new on disk: nothing to do.
        #expect(RescanPlan(known: ["a": Self.known(Self.manifest("a", "cut short"))], before: now, now: now).summary.isEmpty)
        // Kept, and read again as it was: said once, not again (nor counted as changed again).
        known.keptReason = "plugin.json: not valid JSON"
        #expect(RescanPlan(known: ["a": known], before: now, now: now).summary.isEmpty)
        known.keptReason = "another reason"
        #expect(RescanPlan(known: ["a": known], before: now, now: now).summary == ["a: keep"])
    }

    /// Once the bundle is as it was, a running plugin only loses its reason: no restart.
    @Test func aRunningPluginNoLongerRefusedIsNotRestarted() {
        let a = Self.manifest("a")
        let before = PluginCatalog(manifests: [], unusable: [(a, "its bundle folder is writable by every user")])
        var known = Self.known(a)
        known.isRunning = true
        #expect(RescanPlan(known: ["a": known], before: before, now: PluginCatalog(manifests: [a])).summary == ["a: cleared"])
    }

    /// A dependency's new version out of a plugin's range: the running dependent goes on (with the
    /// reason shown), the one that runs no worker (an inactive onCall plugin) is refused and will
    /// not start on its next call.
    @Test func aDependencyOutOfRangeRefusesDependentsThatDoNotRun() {
        let base1 = Self.real("base", "1.0.0"), base2 = Self.real("base", "2.0.0")
        let eager = Self.real("eager", "1.0.0", dependsOn: "base"), lazy = Self.real("lazy", "1.0.0", dependsOn: "base")
        let before = PluginCatalog(manifests: [base1, eager, lazy]), now = PluginCatalog(manifests: [base2, eager, lazy])
        var running = Self.known(eager)
        running.isRunning = true
        var inactive = Self.known(lazy)
        inactive.isInactive = true
        let plan = RescanPlan(known: ["base": Self.known(base1), "eager": running, "lazy": inactive], before: before, now: now)
        #expect(plan.summary == ["base: restart", "eager: keep", "lazy: refuse"])
        guard case .refuse(_, let reason, let changed)? = plan.steps.first(where: { $0.identifier == "lazy" })?.step else { Issue.record("\(plan.summary)"); return }
        #expect(reason.contains("dependency base ^1.0.0 is not met by the installed 2.0.0") && !changed, "not its own change")
        guard case .keep(_, let eagerChanged)? = plan.steps.first(where: { $0.identifier == "eager" })?.step else { Issue.record("\(plan.summary)"); return }
        #expect(!eagerChanged)
        // One still coming up fails by its dependency as it would have: no step of the rescan's.
        #expect(RescanPlan(known: ["base": Self.known(base1), "eager": Self.known(eager)], before: PluginCatalog(manifests: [base1, eager]),
                           now: PluginCatalog(manifests: [base2, eager])).summary == ["base: restart"])
    }

    /// A plugin that starts on demand, with nothing of it running, is not started by a rescan: an
    /// inactive one stays so (unless it now starts with the supervisor), a failed or stopped one
    /// becomes inactive, refused before or changed.
    @Test func aPluginStartedOnDemandWaitsForDemand() {
        let a = Self.manifest("a"), changedA = Self.manifest("a", "v2")
        let refused = PluginCatalog(manifests: [], unusable: [(a, "plugin.json: field 'version': missing")])
        func plan(_ known: RescanPlan.Known, before: PluginCatalog, now: PluginCatalog, onCallNow: Bool = true) -> [String] {
            RescanPlan(known: ["a": known], before: before, now: now) { _ in onCallNow }.summary
        }
        var failed = Self.known(a)
        failed.isDown = true
        failed.startsOnCall = true
        // Its bundle fixed: waits to be needed, as at start.
        #expect(plan(failed, before: refused, now: PluginCatalog(manifests: [a])) == ["a: await need (cured)"])
        #expect(plan(failed, before: PluginCatalog(manifests: [a]), now: PluginCatalog(manifests: [changedA])) == ["a: await need"])
        // Started with the supervisor now: started.
        #expect(plan(failed, before: refused, now: PluginCatalog(manifests: [a]), onCallNow: false) == ["a: restart (cured)"])
        var inactive = Self.known(a)
        inactive.isInactive = true
        inactive.startsOnCall = true
        #expect(plan(inactive, before: PluginCatalog(manifests: [a]), now: PluginCatalog(manifests: [changedA])) == ["a: await need"])
        #expect(plan(inactive, before: PluginCatalog(manifests: [a]), now: PluginCatalog(manifests: [changedA]), onCallNow: false) == ["a: restart"])
        // Idle-stopped, started with the supervisor before and now: it stays inactive too.
        inactive.startsOnCall = false
        #expect(plan(inactive, before: PluginCatalog(manifests: [a]), now: PluginCatalog(manifests: [changedA]), onCallNow: false) == ["a: await need"])
        // A worker of it still there (ending after its dependency failed): restarted, not left
        // waiting behind a worker whose end would stop it.
        var ending = failed
        ending.hasWorker = true
        #expect(plan(ending, before: refused, now: PluginCatalog(manifests: [a])) == ["a: restart (cured)"])
        // A dependent failed by it, retried only when it runs: restarted.
        var holding = failed
        holding.holdsBackDependents = true
        #expect(plan(holding, before: PluginCatalog(manifests: [a]), now: PluginCatalog(manifests: [changedA])) == ["a: restart"])
        // One that runs, or one coming up (a call waits for it), is restarted.
        var coming = Self.known(a)
        coming.startsOnCall = true
        #expect(plan(coming, before: PluginCatalog(manifests: [a]), now: PluginCatalog(manifests: [changedA])) == ["a: restart"])
    }

    /// A folder moved away, a reload, the folder put back and a second reload before the first
    /// one's stop has ended: the plugin comes back once that stop has ended, rather than being
    /// forgotten with its folder in place.
    @Test func aPluginFoundAgainWhileItsRemovalIsUnderWayIsAddedAgainAfterIt() {
        let a = Self.manifest("a"), changedA = Self.manifest("a", "v2")
        var removing = Self.known(a)
        removing.removal = .underWay
        let back = RescanPlan(known: ["a": removing], before: PluginCatalog(manifests: []), now: PluginCatalog(manifests: [changedA]))
        #expect(back.summary == ["a: add after its removal"])
        #expect(back.removed.isEmpty)
        if case .addAfterItsRemoval(let manifest, _, _)? = back.steps.first?.step {
            #expect(manifest.fingerprint == changedA.fingerprint)
        } else {
            Issue.record("no step to add it again")
        }
        // Back unchanged: the same (it is a new plugin once its stop ends, whatever it was).
        #expect(RescanPlan(known: ["a": removing], before: PluginCatalog(manifests: []), now: PluginCatalog(manifests: [a])).summary
                == ["a: add after its removal"])
        // Back, and refused as it is now: added again as refused.
        let refused = PluginCatalog(manifests: [], unusable: [(a, "its bundle folder is writable by every user")])
        #expect(RescanPlan(known: ["a": removing], before: PluginCatalog(manifests: []), now: refused).summary
                == ["a: add after its removal refused"])
        // Still gone: its removal goes on, nothing new (not stopped a second time).
        let gone = RescanPlan(known: ["a": removing], before: PluginCatalog(manifests: []), now: PluginCatalog(manifests: []))
        #expect(gone.summary.isEmpty)
        #expect(gone.removed.isEmpty)
    }

    /// Found back by one rescan while being removed, then seen by more: read again while back
    /// (not new twice), forgotten after its stop if gone again.
    @Test func aPluginFoundAgainThenGoneAgainIsForgottenAfterItsRemoval() {
        let a = Self.manifest("a")
        var foundAgain = Self.known(a)
        foundAgain.removal = .foundAgain
        #expect(RescanPlan(known: ["a": foundAgain], before: PluginCatalog(manifests: [a]), now: PluginCatalog(manifests: [a])).summary
                == ["a: add after its removal (again)"])
        let goneAgain = RescanPlan(known: ["a": foundAgain], before: PluginCatalog(manifests: [a]), now: PluginCatalog(manifests: []))
        #expect(goneAgain.summary == ["a: forget after its removal"])
        #expect(goneAgain.removed.isEmpty)
        // Beside a plugin removed now, and one new: each its own step.
        let b = Self.manifest("b"), c = Self.manifest("c")
        let mixed = RescanPlan(known: ["a": foundAgain, "b": Self.known(b)], before: PluginCatalog(manifests: [a, b]),
                               now: PluginCatalog(manifests: [c]))
        #expect(mixed.summary == ["c: add", "a: forget after its removal", "b: remove"])
        #expect(mixed.removed == ["b"])
    }
}
