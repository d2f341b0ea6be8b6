extension CallHop {
    /// `linkCalls` (worker → supervisor, docs/protocol.md "Peer links"): what a caller's worker saw
    /// of the calls it sent over its link to `target` since its last report, so the callee's
    /// `plugin_calls_total` and `plugin_call_duration_seconds` count them as if the supervisor had
    /// forwarded them. Written by the worker, read by the supervisor, both with this type:
    /// `{"type":"linkCalls","target":"…","counts":{"ok":3,"timeout":1},"buckets":[…],"sumNs":…}`.
    public struct LinkCalls: Codable, Sendable, Equatable {
        public var type = MessageKind.linkCalls
        public var target: String
        /// Answered calls: counts named by outcome (`ok`, `error`, `timeout`, `unavailable`), their
        /// durations per bucket (`bucketBounds`) and the durations' sum.
        public var calls: Tally
        /// The link to `target` with this number ended by itself (its other end closed, or it broke):
        /// the supervisor may make a new one.
        public var endedLink: UInt64?

        public init(target: String, calls: Tally, endedLink: UInt64? = nil) {
            self.target = target
            self.calls = calls
            self.endedLink = endedLink
        }

        enum CodingKeys: String, CodingKey {
            case type, target, counts, buckets, sumNs, endedLink
        }

        public init(from decoder: Decoder) throws {
            let c = try decoder.container(keyedBy: CodingKeys.self)
            type = try c.decode(MessageKind.self, forKey: .type)
            target = try c.decode(String.self, forKey: .target)
            calls = Tally(counts: try c.decode(Counts.self, forKey: .counts), buckets: try c.decode([Int64].self, forKey: .buckets),
                          sumNs: try c.decode(Int64.self, forKey: .sumNs))
            endedLink = try c.decodeIfPresent(UInt64.self, forKey: .endedLink)
        }

        public func encode(to encoder: Encoder) throws {
            var c = encoder.container(keyedBy: CodingKeys.self)
            try c.encode(type, forKey: .type)
            try c.encode(target, forKey: .target)
            try c.encode(calls.counts, forKey: .counts)
            try c.encode(calls.buckets, forKey: .buckets)
            try c.encode(calls.sumNs, forKey: .sumNs)
            try c.encodeIfPresent(endedLink, forKey: .endedLink)
        }
    }
}
