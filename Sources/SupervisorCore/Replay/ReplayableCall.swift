/// A call sent to a worker, as `CrashReplay` reads it when that worker dies: its method, its
/// deadline, whether its caller still wants the answer, and what crashes it went through.
///
/// The two counts travel with the call from worker to worker (through the wait queue too): they
/// are what bounds a call that crashes every worker it reaches.
package protocol ReplayableCall: WaitingRequest {
    /// The method called, matched against `IdempotentMethods`.
    var method: String { get }
    /// Times it was sent again after a worker had started it (what `limits.retries` bounds).
    var retries: Int { get set }
    /// Workers that died while holding it, before the one that died now.
    var crashes: Int { get set }
    /// Part of its answer (a chunk of its stream) has reached its caller: running it again would
    /// answer that part twice, so it is not sent again, idempotent or not.
    var answerBegun: Bool { get }
}

extension ReplayableCall {
    package var answerBegun: Bool { false }
}
