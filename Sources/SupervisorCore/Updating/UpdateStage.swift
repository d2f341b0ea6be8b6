/// Where one plugin's update is (SPEC §8, §9), from the new version's files swapped in to the end of
/// their grace period, with the driver's `Files` (what it staged, the previous version) in the
/// stage they belong to. Each input returns what the driver does; a second update while one is
/// under way is refused, so the files of one still starting stay as they are.
///
///     none ──begin──► beside ─────────┐ new version answered `startup` (took over)
///          └────────► stopAndStart ───┴─ verdict(nil) ──► grace(until) ──end / time──► none
///                       verdict(problem) ──► none: files rolled back, the old version serves
///                                 grace: crash before `until` ──► none: rolled back
package enum UpdateStage<Files> {
    /// No update under way and no previous version kept.
    case none
    /// The new version's worker comes up beside the running one, which serves every call until
    /// the new one answers `startup` (an update with no call dropped).
    case beside(Files)
    /// The plugin is stopped and started as the new version (it was not running, or the new
    /// version's dependencies were not).
    case stopAndStart(Files)
    /// The new version serves; the previous one stays on disk until `until`, to be put back if the
    /// new one crashes before then.
    case grace(Files, until: Instant)

    /// How the update starts: beside the running worker, or by stopping and starting the plugin.
    package enum Start: Equatable, Sendable {
        case beside, stopAndStart
    }

    /// What the driver does, in order.
    package enum Action {
        /// The previous version kept by an earlier update is deleted (its grace ends early or on time).
        case deletePrevious(Files)
        /// The new version starts beside the running worker.
        case startBeside
        /// The plugin stops and starts as the new version.
        case stopAndStart
        /// The new version runs: the previous one is kept until `until` (a timer ends the grace).
        case keepPrevious(until: Instant)
        /// The new version did not start (`problem`): its files are rolled back and the old version
        /// serves again (`how` the update had started: beside, the old worker serves on; else the
        /// old version is started again).
        case rollBack(Files, problem: String, how: Start)
        /// The new version crashed within the grace period: the previous version's files are put
        /// back and it starts again.
        case rollBackAfterCrash(Files, crash: String)
    }

    /// Why an update cannot begin now.
    package enum Refusal: Error, Equatable, Sendable {
        case underWay
    }

    /// An update is starting (`beside` or stopped and started as the new version), or refused
    /// because one still is. A previous version kept by an earlier update is final now: one
    /// rollback point at a time.
    package mutating func begin(_ files: Files, _ how: Start) -> Result<[Action], Refusal> {
        var actions: [Action] = []
        switch self {
        case .beside, .stopAndStart: return .failure(.underWay)
        case .grace(let previous, _): actions.append(.deletePrevious(previous))
        case .none: break
        }
        self = how == .beside ? .beside(files) : .stopAndStart(files)
        actions.append(how == .beside ? .startBeside : .stopAndStart)
        return .success(actions)
    }

    /// The kept previous version is deleted now, if there is one (another install's swap, an
    /// uninstall); an update still starting is left alone.
    package mutating func endGrace() -> [Action] {
        guard case .grace(let files, _) = self else { return [] }
        self = .none
        return [.deletePrevious(files)]
    }

    /// How the new version's start ended: nil, it runs (the grace period begins, `graceSeconds`
    /// long); else why not (rolled back).
    package mutating func verdict(_ problem: String?, now: Instant, graceSeconds: Int) -> [Action] {
        let files: Files
        let how: Start
        switch self {
        case .beside(let f): (files, how) = (f, .beside)
        case .stopAndStart(let f): (files, how) = (f, .stopAndStart)
        case .none, .grace: return []
        }
        guard let problem else {
            let until = now.adding(milliseconds: graceSeconds * 1_000)
            self = .grace(files, until: until)
            return [.keepPrevious(until: until)]
        }
        self = .none
        return [.rollBack(files, problem: problem, how: how)]
    }

    /// The serving worker crashed at `now`: within the grace period the update is rolled back; at
    /// any other time (or stage) the crash is none of the update's business.
    package mutating func crashed(_ crash: String, now: Instant) -> [Action] {
        guard case .grace(let files, let until) = self, now < until else { return [] }
        self = .none
        return [.rollBackAfterCrash(files, crash: crash)]
    }

    /// A crash at `now` would roll the update back (its life then waits for the rollback).
    package func withinGrace(now: Instant) -> Bool {
        if case .grace(_, let until) = self { return now < until }
        return false
    }

    /// A new version is starting (a second update or an uninstall must wait).
    package var isStarting: Bool {
        switch self {
        case .beside, .stopAndStart: return true
        case .none, .grace: return false
        }
    }

    /// A previous version is kept for its grace period.
    package var keepsPrevious: Bool {
        if case .grace = self { return true }
        return false
    }
}
