import Testing
import SupervisorCore

/// Where a request for a plugin goes (Routing/Route.swift), for every phase and worker state.
@Suite struct RouteTests {
    static func target(_ phase: PluginPhase, problem: String? = nil, worker: Route.Worker? = Route.Worker()) -> Route.Target {
        Route.Target(identifier: "p", phase: phase, problem: problem, worker: worker)
    }

    @Test func anUnknownPluginIsNotFound() {
        #expect(Route.decide(nil, named: "q", shuttingDown: false) == .refuse(ErrorBody(.notFound, "no plugin q is installed")))
    }

    @Test func aRunningConnectedWorkerTakesIt() {
        #expect(Route.decide(Self.target(.running), named: "p", shuttingDown: false) == .forward)
    }

    @Test(arguments: [PluginPhase.waiting, .starting, .restarting])
    func aPluginComingUpMakesItWait(_ phase: PluginPhase) {
        #expect(Route.decide(Self.target(phase, worker: nil), named: "p", shuttingDown: false) == .wait)
        #expect(Route.decide(Self.target(phase), named: "p", shuttingDown: false) == .wait)
    }

    @Test(arguments: [Route.Worker(stopRequested: true), Route.Worker(connected: false), Route.Worker(mayHaveEnded: true),
                      Route.Worker(awaitsItsPageAsk: true)])
    func aWorkerBeingReplacedMakesItWait(_ worker: Route.Worker) {
        #expect(Route.decide(Self.target(.running, worker: worker), named: "p", shuttingDown: false) == .wait)
    }

    @Test func aRunningPluginWithoutAWorkerYetMakesItWait() {
        #expect(Route.decide(Self.target(.running, worker: nil), named: "p", shuttingDown: false) == .wait)
    }

    @Test func aFullSocketMakesItWaitForRoom() {
        let full = Self.target(.running, worker: Route.Worker(writable: false))
        #expect(Route.decide(full, named: "p", shuttingDown: false) == .wait)
        #expect(Route.queueFull(full, limit: 3).message == "p is not keeping up (its socket buffer is full) and 3 requests already wait for it (callQueueLimit)")
        #expect(Route.notKeepingUp(full) == ErrorBody(.unavailable, "p is not keeping up: its socket buffer is full"))
        #expect(Route.notKeepingUp(Self.target(.running, worker: Route.Worker())) == nil)
        // At shutdown it is refused, as every request that cannot go at once is.
        #expect(Route.decide(full, named: "p", shuttingDown: true) == .refuse(ErrorBody(.unavailable, "p is stopping: the supervisor is shutting down")))
    }

    @Test func aFailedPluginRefusesWithItsProblem() {
        let route = Route.decide(Self.target(.failed(byDependency: false), problem: "restarted 5 times in 60 s", worker: nil), named: "p",
                                 shuttingDown: false)
        #expect(route == .refuse(ErrorBody(.unavailable, "p is failed: restarted 5 times in 60 s")))
        #expect(Route.decide(Self.target(.stopped, worker: nil), named: "p", shuttingDown: false) == .refuse(ErrorBody(.unavailable, "p is stopped")))
    }

    @Test func atShutdownNothingWaits() {
        for phase in [PluginPhase.waiting, .starting, .restarting] {
            #expect(Route.decide(Self.target(phase, worker: nil), named: "p", shuttingDown: true)
                == .refuse(ErrorBody(.unavailable, "p is stopping: the supervisor is shutting down")))
        }
        #expect(Route.decide(Self.target(.running, worker: Route.Worker(stopRequested: true)), named: "p", shuttingDown: true)
            == .refuse(ErrorBody(.unavailable, "p is stopping: the supervisor is shutting down")))
        #expect(Route.decide(Self.target(.running), named: "p", shuttingDown: true) == .forward,
                "a worker still serving during the stop of its dependents takes calls")
    }

    /// `forward`'s guard and `mustWait` are one rule: for every state, exactly one of forward,
    /// wait, refuse.
    @Test func everyStateHasExactlyOneRoute() {
        let phases: [PluginPhase] = [.waiting, .starting, .running, .restarting, .failed(byDependency: false), .failed(byDependency: true), .stopped]
        let workers: [Route.Worker?] = [nil] + [false, true].flatMap { s in [false, true].flatMap { c in [false, true].flatMap { m in
            [false, true].map { p in Route.Worker(stopRequested: s, connected: c, mayHaveEnded: m, awaitsItsPageAsk: p) } } } }
        for phase in phases {
            for worker in workers {
                for shuttingDown in [false, true] {
                    let target = Self.target(phase, worker: worker)
                    let route = Route.decide(target, named: "p", shuttingDown: shuttingDown)
                    let waits = Route.mustWait(target, shuttingDown: shuttingDown)
                    if route == .wait { #expect(waits) }
                    if route == .forward {
                        #expect(phase == .running && worker?.connected == true && worker?.stopRequested == false && worker?.awaitsItsPageAsk == false)
                    }
                    if case .refuse = route { #expect(!waits) }
                }
            }
        }
    }

    @Test func aFullQueueNamesTheLimit() {
        #expect(Route.queueFull(Self.target(.starting), limit: 3)
            == ErrorBody(.unavailable, "p is starting and 3 requests already wait for it (callQueueLimit)"))
    }

    @Test func waitingRequestsAreAbandonedOnlyForGood() {
        #expect(Route.abandonReason(Self.target(.restarting), shuttingDown: false) == nil)
        #expect(Route.abandonReason(Self.target(.starting), shuttingDown: true) == "the supervisor is shutting down")
        #expect(Route.abandonReason(Self.target(.failed(byDependency: true), problem: "dependency q is failed"), shuttingDown: false)
            == "p is failed: dependency q is failed")
        #expect(Route.abandonReason(Self.target(.stopped), shuttingDown: false) == "p is stopped")
    }
}
