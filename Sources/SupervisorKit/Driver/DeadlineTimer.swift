import NIOCore
import SupervisorCore

/// The one timer behind the deadlines the loop keeps: requests in flight to workers, requests
/// waiting for their plugin, descriptors kept at the handoff socket for a token. It is armed for
/// the earliest deadline it was told of, on a 10 ms grid (a deadline is acted on at the first tick
/// of the grid at or after it, as the repeated 10 ms check before it did), and not at all when
/// nothing has a deadline: an idle supervisor, or a program embedding one, is not woken for it
/// (it was, 100 times a second).
///
/// Whoever sets a deadline says so (`due`); a deadline moved later needs no word (the timer fires
/// early, the check finds nothing due and arms for what is next). Each check returns the earliest
/// deadline still ahead. Confined to the event loop.
final class DeadlineTimer {
    static let granularityNanoseconds: UInt64 = 10_000_000

    private let loop: EventLoop
    /// Checks at `now`: settles what is due and returns the earliest deadline left (nil: none).
    /// Set by the engine once its components exist.
    var check: (NIODeadline) -> NIODeadline? = { _ in nil }
    /// Plugins run (between `start` and `stop`): deadlines are kept.
    private(set) var running = false
    /// The tick it is armed for, and its task.
    private var armed: (at: NIODeadline, task: Scheduled<Void>)?

    /// The tick it will fire at (nil: it will not: nothing has a deadline, or it is stopped).
    var armedFor: NIODeadline? { armed?.at }

    init(loop: EventLoop) {
        self.loop = loop
    }

    /// Deadlines count from now on; one check at the next tick finds those set before.
    func start() {
        running = true
        due(loop.now)
    }

    /// No deadline counts any more (every worker has ended, or an upgrade hands over).
    func stop() {
        running = false
        armed?.task.cancel()
        armed = nil
    }

    /// Something has `deadline`: the timer fires by the tick at or after it.
    @inline(__always)
    func due(_ deadline: NIODeadline) {
        guard running else { return }
        let at = Self.tick(atOrAfter: deadline)
        if let armed, armed.at <= at { return }
        arm(at)
    }

    /// The same for a deadline on the monotonic clock in nanoseconds (`ProcessControl.monotonicNanoseconds`).
    func due(monotonicNanoseconds: Int64) {
        due(Self.deadline(monotonicNanoseconds: monotonicNanoseconds))
    }

    /// A time of the monotonic clock in nanoseconds as a deadline (NIO reads the same clock).
    static func deadline(monotonicNanoseconds: Int64) -> NIODeadline {
        .uptimeNanoseconds(UInt64(max(0, monotonicNanoseconds)))
    }

    private func arm(_ at: NIODeadline) {
        armed?.task.cancel()
        armed = (at, loop.assumeIsolated().scheduleTask(deadline: at) { [self] in fire() })
    }

    private func fire() {
        armed = nil
        guard running else { return }
        let now = loop.now
        // A deadline set while the check ran armed the timer already; `due` keeps the earlier.
        if let next = check(now) { due(max(next, now)) }
    }

    /// The first tick of the grid at or after `deadline`.
    static func tick(atOrAfter deadline: NIODeadline) -> NIODeadline {
        let n = deadline.uptimeNanoseconds
        let (q, r) = n.quotientAndRemainder(dividingBy: granularityNanoseconds)
        return r == 0 ? deadline : .uptimeNanoseconds((q + 1) &* granularityNanoseconds)
    }
}
