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
}
