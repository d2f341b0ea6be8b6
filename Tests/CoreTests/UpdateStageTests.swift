import Testing
import SupervisorCore

/// Where an update is, from the new files to the end of their grace (Updating/UpdateStage.swift).
@Suite struct UpdateStageTests {
    typealias Stage = UpdateStage<String>
    let t = Instant(nanoseconds: 10_000_000_000)

    /// The action's case name and files, for comparing.
    static func names(_ actions: [Stage.Action]) -> [String] {
        actions.map {
            switch $0 {
            case .deletePrevious(let f): "deletePrevious(\(f))"
            case .startBeside: "startBeside"
            case .stopAndStart: "stopAndStart"
            case .keepPrevious: "keepPrevious"
            case .rollBack(let f, let problem, let how): "rollBack(\(f), \(problem), \(how))"
            case .rollBackAfterCrash(let f, let crash): "rollBackAfterCrash(\(f), \(crash))"
            }
        }
    }

    @Test func theSuccessorTakesOverThenThePreviousIsKeptForTheGrace() throws {
        var stage = Stage.none
        #expect(Self.names(try stage.begin("v2", .beside).get()) == ["startBeside"])
        #expect(stage.isStarting && !stage.keepsPrevious)
        let actions = stage.verdict(nil, now: t, graceSeconds: 30)
        guard case .keepPrevious(let until) = actions.first, actions.count == 1 else { Issue.record("\(actions)"); return }
        #expect(until == t + .seconds(30))
        #expect(!stage.isStarting && stage.keepsPrevious)
        #expect(stage.withinGrace(now: t + .seconds(29)))
        #expect(!stage.withinGrace(now: until), "the grace has ended at its last instant")
        #expect(Self.names(stage.endGrace()) == ["deletePrevious(v2)"])
        guard case .none = stage else { Issue.record("\(stage)"); return }
    }

    @Test(arguments: [Stage.Start.beside, .stopAndStart])
    func aSuccessorThatFailsItsStartIsRolledBack(how: Stage.Start) throws {
        var stage = Stage.none
        #expect(Self.names(try stage.begin("v2", how).get()) == [how == .beside ? "startBeside" : "stopAndStart"])
        #expect(Self.names(stage.verdict("startup failed", now: t, graceSeconds: 30)) == ["rollBack(v2, startup failed, \(how))"])
        #expect(!stage.isStarting && !stage.keepsPrevious)
        #expect(stage.verdict(nil, now: t, graceSeconds: 30).isEmpty, "a second verdict changes nothing")
    }

    @Test func aSecondUpdateWhileOneStartsIsRefused() throws {
        var stage = Stage.none
        _ = try stage.begin("v2", .beside).get()
        #expect(throws: Stage.Refusal.underWay) { try stage.begin("v3", .beside).get() }
        #expect(stage.endGrace().isEmpty, "an update still starting keeps its files")
    }

    @Test func anUpdateWithinAnotherOnesGraceMakesTheEarlierFinal() throws {
        var stage = Stage.none
        _ = try stage.begin("v2", .beside).get()
        _ = stage.verdict(nil, now: t, graceSeconds: 30)
        #expect(Self.names(try stage.begin("v3", .stopAndStart).get()) == ["deletePrevious(v2)", "stopAndStart"])
    }

    @Test func aCrashRollsBackOnlyWithinTheGrace() throws {
        var stage = Stage.none
        _ = try stage.begin("v2", .beside).get()
        #expect(stage.crashed("SIGSEGV", now: t).isEmpty, "a crash while the new version starts is the successor's own end")
        _ = stage.verdict(nil, now: t, graceSeconds: 30)
        var late = stage
        #expect(late.crashed("SIGSEGV", now: t + .seconds(30)).isEmpty, "after the grace: restarted as any crash")
        #expect(late.keepsPrevious, "the timer ends that grace, not the crash")
        #expect(Self.names(stage.crashed("SIGSEGV", now: t + .seconds(1))) == ["rollBackAfterCrash(v2, SIGSEGV)"])
        #expect(!stage.keepsPrevious && !stage.withinGrace(now: t + .seconds(1)))
    }
}
