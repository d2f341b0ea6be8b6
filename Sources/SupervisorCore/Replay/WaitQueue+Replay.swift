extension WaitQueue {
    /// Puts `resent` (a dead worker's replayed and retried calls, in `CrashReplay`'s order) ahead of
    /// every request that waits, so the next worker gets them first, in their original order.
    ///
    /// They arrived before anything that waits now (the queue fills while the plugin has no serving
    /// worker), so this keeps the order calls came in. No limit refuses them: they were accepted
    /// before. A waiting request whose caller is gone leaves here, as at `release`.
    package mutating func putAhead(_ resent: [Request]) {
        guard !resent.isEmpty else { return }
        var merged = WaitQueue()
        for request in resent + release() where !request.callerIsGone {
            _ = merged.add(request, limit: .max)
        }
        self = merged
    }
}
