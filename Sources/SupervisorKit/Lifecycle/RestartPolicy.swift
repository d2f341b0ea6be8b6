import NIOCore

/// When to restart a crashed plugin (SPEC §8): exponential backoff with jitter, the first restart
/// at once, and at most `limit` restarts in `windowSeconds`, after which the plugin stays failed.
/// Pure: the history and the clock are inputs, so every rule is unit-tested.
struct RestartPolicy: Sendable, Equatable {
    var limit: Int
    var windowSeconds: Int
    var backoffBaseMs: Int
    var backoffMaxMs: Int

    enum Decision: Equatable {
        /// Restart after this many milliseconds (the `attempt`-th restart in the window, from 1).
        case restart(delayMs: Int, attempt: Int)
        /// `limit` restarts already happened in the window: stay failed.
        case giveUp(restartsInWindow: Int)
    }

    /// Decides, and on `.restart` records `now` in `history` (restarts older than the window are
    /// dropped from it first). `jitter` scales the delay; pass a value in 0.8...1.2.
    func decide(history: inout [NIODeadline], now: NIODeadline, jitter: Double) -> Decision {
        let window = TimeAmount.seconds(Int64(windowSeconds))
        history.removeAll { now - $0 >= window }
        if history.count >= limit { return .giveUp(restartsInWindow: history.count) }
        let delay = Self.backoff(previousRestarts: history.count, baseMs: backoffBaseMs, maxMs: backoffMaxMs, jitter: jitter)
        history.append(now)
        return .restart(delayMs: delay, attempt: history.count)
    }

    /// Whether a crash now would be restarted at once (the first restart in the window), without
    /// recording anything: the standby worker is spawned on this guess (Lifecycle/Standby.swift).
    func restartsAtOnce(history: [NIODeadline], now: NIODeadline) -> Bool {
        var scratch = history
        if case .restart(delayMs: 0, _) = decide(history: &scratch, now: now, jitter: 1) { return true }
        return false
    }

    /// 0 for the first restart in the window; then base, 2×base, 4×base, ... × jitter, at most maxMs.
    static func backoff(previousRestarts n: Int, baseMs: Int, maxMs: Int, jitter: Double) -> Int {
        guard n > 0 else { return 0 }
        let base = baseMs << min(n - 1, 20)
        return min(maxMs, Int(Double(base) * jitter))
    }
}
