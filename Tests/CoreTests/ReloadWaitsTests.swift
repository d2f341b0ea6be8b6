import Testing
import SupervisorCore

/// When a reload is answered (Rescanning/ReloadWaits.swift), from values alone.
@Suite struct ReloadWaitsTests {
    static let t0 = Instant(nanoseconds: 1_000_000_000)
    static let until = t0.adding(milliseconds: 35_000)

    static func due(_ waits: inout ReloadWaits<String>, at now: Instant = t0, shuttingDown: Bool = false,
                    _ phases: [String: PluginPhase]) -> [String] {
        waits.due(now: now, shuttingDown: shuttingDown) { phases[$0] }
    }

    @Test func answeredAtOnceWhenNothingIsUnderWay() {
        var waits = ReloadWaits<String>()
        waits.began("r1", until: Self.until)
        #expect(Self.due(&waits, ["a": .running, "b": .failed(byDependency: false), "c": .inactive, "d": .stopped]) == ["r1"])
        #expect(waits.isEmpty)
        // Answered once: asked again, nothing.
        #expect(Self.due(&waits, ["a": .running]).isEmpty)
    }

    /// A plugin the rescan set coming up holds its reload back until it runs (or has failed);
    /// the reloads that did not start it are answered.
    @Test func aPluginTheRescanStartedHoldsItsReloadBack() {
        for phase in [PluginPhase.waiting, .starting, .restarting] {
            var waits = ReloadWaits<String>()
            waits.began("r2", until: Self.until)
            waits.began("r1", until: Self.until, comingUp: ["new"])
            #expect(Self.due(&waits, ["new": phase, "old": .running]) == ["r2"], "\(phase)")
            #expect(Self.due(&waits, ["new": phase, "old": .running]).isEmpty, "\(phase)")
            #expect(Self.due(&waits, ["new": .failed(byDependency: false), "old": .running]) == ["r1"], "\(phase)")
        }
    }

    /// A second reload while the first waits for a plugin it started (which is, for the second's
    /// rescan, already coming up): the second waits for it too, and is not answered first.
    @Test func aLaterReloadWaitsForWhatAnEarlierOneStarted() {
        var waits = ReloadWaits<String>()
        waits.began("r1", until: Self.until, comingUp: ["new"])
        waits.began("r2", until: Self.until)
        #expect(Self.due(&waits, ["new": .starting]).isEmpty)
        #expect(Self.due(&waits, ["new": .running]) == ["r1", "r2"])
    }

    /// A plugin coming up for another reason (a crash loop's restarts, a backoff, an activation)
    /// holds no reload back: the answer does not wait for the reload's deadline.
    @Test func aPluginComingUpOfItsOwnHoldsNothingBack() {
        for phase in [PluginPhase.waiting, .starting, .restarting] {
            var waits = ReloadWaits<String>()
            waits.began("r", until: Self.until)
            #expect(Self.due(&waits, ["looping": phase, "old": .running]) == ["r"], "\(phase)")
        }
    }

    /// One the rescan started and that is then forgotten (uninstalled) holds nothing back.
    @Test func aForgottenPluginHoldsNothingBack() {
        var waits = ReloadWaits<String>()
        waits.began("r", until: Self.until, comingUp: ["new"])
        #expect(Self.due(&waits, ["new": .starting]).isEmpty)
        #expect(Self.due(&waits, [:]) == ["r"])
    }

    /// A plugin a rescan stops (removed from the folders) holds the answer back until it has
    /// stopped, or until it has left the table (forgotten).
    @Test func aStopHoldsTheAnswerUntilItEnds() {
        var waits = ReloadWaits<String>()
        waits.stopping(["gone", "other"])
        waits.began("r", until: Self.until)
        #expect(Self.due(&waits, ["gone": .running, "other": .running]).isEmpty)
        waits.stopped("gone")
        #expect(Self.due(&waits, ["gone": .stopped, "other": .running]).isEmpty)
        // "other" is forgotten (an uninstall): it holds nothing back any more.
        #expect(Self.due(&waits, ["gone": .stopped]) == ["r"])
    }

    /// Two reloads restart one plugin (its bundle changed twice): the second cuts the first start
    /// short, and neither reload is answered until the second start has ended.
    @Test func restartsAreCountedPerPlugin() {
        var waits = ReloadWaits<String>()
        waits.restarting("a")
        waits.began("r1", until: Self.until)
        waits.restarting("a")
        waits.began("r2", until: Self.until)
        // The first start ends (cut short by the second): the plugin is between its workers.
        waits.restarted("a")
        #expect(Self.due(&waits, ["a": .stopped]).isEmpty)
        waits.restarted("a")
        #expect(Self.due(&waits, ["a": .running]) == ["r1", "r2"])
        // An extra end (a restart the reload did not count) does not go below nothing.
        waits.restarted("a")
        waits.restarting("a")
        waits.began("r3", until: Self.until)
        #expect(Self.due(&waits, ["a": .running]).isEmpty)
    }

    /// At its deadline a reload is answered as things stand; a later one waits on.
    @Test func theDeadlineAnswersOnlyTheReloadsItIsFor() {
        let slow: [String: PluginPhase] = ["slow": .starting]
        var waits = ReloadWaits<String>()
        waits.began("early", until: Self.until, comingUp: ["slow"])
        waits.began("late", until: Self.until.adding(milliseconds: 10_000), comingUp: ["slow"])
        #expect(Self.due(&waits, at: Self.until.adding(milliseconds: -1), slow).isEmpty)
        #expect(Self.due(&waits, at: Self.until, slow) == ["early"])
        #expect(Self.due(&waits, at: Self.until.adding(milliseconds: 9_999), slow).isEmpty)
        #expect(Self.due(&waits, at: Self.until.adding(milliseconds: 10_000), slow) == ["late"])
    }

    @Test func shutdownAnswersEveryReload() {
        var waits = ReloadWaits<String>()
        waits.restarting("a")
        waits.stopping(["b"])
        waits.began("r1", until: Self.until, comingUp: ["c"])
        waits.began("r2", until: Self.until)
        #expect(Self.due(&waits, shuttingDown: true, ["a": .starting, "b": .running, "c": .starting]) == ["r1", "r2"])
    }
}
