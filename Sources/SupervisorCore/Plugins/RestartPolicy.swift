/// When to restart a crashed plugin (SPEC §8): exponential backoff with jitter, the first restart
/// at once, and at most `limit` restarts in `windowSeconds`, after which the plugin stays failed.
/// The history and the clock are inputs, so every rule is tested without a process.
package struct RestartPolicy: Sendable, Equatable {
    package var limit: Int
    package var windowSeconds: Int
    package var backoffBaseMs: Int
    package var backoffMaxMs: Int

    package init(limit: Int, windowSeconds: Int, backoffBaseMs: Int, backoffMaxMs: Int) {
        self.limit = limit
        self.windowSeconds = windowSeconds
        self.backoffBaseMs = backoffBaseMs
        self.backoffMaxMs = backoffMaxMs
    }

    package enum Decision: Equatable, Sendable {
        /// Restart after this many milliseconds (the `attempt`-th restart in the window, from 1).
        case restart(delayMs: Int, attempt: Int)
        /// `limit` restarts already happened in the window: stay failed.
        case giveUp(restartsInWindow: Int)
    }

    /// Decides, and on `.restart` records `now` in `history` (restarts older than the window are
    /// dropped from it first). `jitter` scales the delay; pass a value in 0.8...1.2.
    package func decide(history: inout [Instant], now: Instant, jitter: Double) -> Decision {
        let window = Int64(windowSeconds) * 1_000_000_000
        history.removeAll { now.nanoseconds(since: $0) >= window }
        if history.count >= limit { return .giveUp(restartsInWindow: history.count) }
        let delay = Self.backoff(previousRestarts: history.count, baseMs: backoffBaseMs, maxMs: backoffMaxMs, jitter: jitter)
        history.append(now)
        return .restart(delayMs: delay, attempt: history.count)
    }

    /// Whether a crash now would be restarted at once (the first restart in the window), without
    /// recording anything: a standby worker is spawned on this guess.
    package func restartsAtOnce(history: [Instant], now: Instant) -> Bool {
        var scratch = history
        if case .restart(delayMs: 0, _) = decide(history: &scratch, now: now, jitter: 1) { return true }
        return false
    }

    /// 0 for the first restart in the window; then base, 2×base, 4×base, ... × jitter, at most maxMs.
    package static func backoff(previousRestarts n: Int, baseMs: Int, maxMs: Int, jitter: Double) -> Int {
        guard n > 0 else { return 0 }
        let base = baseMs << min(n - 1, 20)
        return min(maxMs, Int(Double(base) * jitter))
    }
}
