/// How long an upgrade waits for the supervisor to be quiet before it gives up (SPEC §14: calls in
/// flight are answered). While everything in flight to the workers when the wait begins is calls
/// and opens, until the latest of their deadlines, at least `quietMs` and at most `callsMs`;
/// anything else in flight (a stream, an event, a start) or nothing: `quietMs`.
package enum QuietWait {
    /// The wait for anything but calls, and the shortest.
    package static let quietMs = 2_000
    /// The longest wait for calls in flight: below a client's 30 s for the upgrade's own answer,
    /// with the new binary's 5 s to take over.
    package static let callsMs = 20_000

    /// What is in flight to one worker when the wait begins.
    package enum InFlight: Equatable {
        /// A call or an open without a stream, due at `deadline`.
        case call(deadline: Instant)
        /// A stream, an event, an unlink, a page asked for.
        case other
    }

    /// The wait, in milliseconds, for what is `inFlight` at `now`.
    package static func milliseconds(_ inFlight: [InFlight], now: Instant) -> Int {
        var latest: Instant?
        for request in inFlight {
            guard case .call(let deadline) = request else { return quietMs }
            latest = max(latest ?? deadline, deadline)
        }
        guard let latest else { return quietMs }
        let ms = latest == .never ? Int64(callsMs) : latest.nanoseconds(since: now) / 1_000_000
        return Int(min(max(ms, Int64(quietMs)), Int64(callsMs)))
    }
}
