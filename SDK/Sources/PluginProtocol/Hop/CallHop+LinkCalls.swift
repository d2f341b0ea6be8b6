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
        /// Streams over the link since the last report (`plugin_streams_total`,
        /// `plugin_stream_chunks_total`); absent when there were none.
        public var streams: StreamTally?

        public init(target: String, calls: Tally, endedLink: UInt64? = nil, streams: StreamTally? = nil) {
            self.target = target
            self.calls = calls
            self.endedLink = endedLink
            self.streams = streams
        }

        enum CodingKeys: String, CodingKey {
            case type, target, counts, buckets, sumNs, endedLink, streams
        }

        public init(from decoder: Decoder) throws {
            let c = try decoder.container(keyedBy: CodingKeys.self)
            type = try c.decode(MessageKind.self, forKey: .type)
            target = try c.decode(String.self, forKey: .target)
            calls = Tally(counts: try c.decode(Counts.self, forKey: .counts), buckets: try c.decode([Int64].self, forKey: .buckets),
                          sumNs: try c.decode(Int64.self, forKey: .sumNs))
            endedLink = try c.decodeIfPresent(UInt64.self, forKey: .endedLink)
            streams = try c.decodeIfPresent(StreamTally.self, forKey: .streams)
        }

        public func encode(to encoder: Encoder) throws {
            var c = encoder.container(keyedBy: CodingKeys.self)
            try c.encode(type, forKey: .type)
            try c.encode(target, forKey: .target)
            try c.encode(calls.counts, forKey: .counts)
            try c.encode(calls.buckets, forKey: .buckets)
            try c.encode(calls.sumNs, forKey: .sumNs)
            try c.encodeIfPresent(endedLink, forKey: .endedLink)
            try c.encodeIfPresent(streams, forKey: .streams)
        }
    }

    /// What a caller's worker counted of the streams over one link: calls with a stream, chunks
    /// of their answers (from the callee) and of their input (to it).
    public struct StreamTally: Codable, Sendable, Equatable {
        public var opened: Int64 = 0
        public var answer: Int64 = 0
        public var input: Int64 = 0

        public init(opened: Int64 = 0, answer: Int64 = 0, input: Int64 = 0) {
            self.opened = opened
            self.answer = answer
            self.input = input
        }

        public var isEmpty: Bool { opened == 0 && answer == 0 && input == 0 }
        /// Why a report's counts cannot be true (negative), or nil.
        public var problem: String? {
            if opened < 0 || answer < 0 || input < 0 { return "negative stream counts" }
            if [opened, answer, input].contains(where: { $0 > CallHop.largestReportedCount }) { return "a stream count over \(CallHop.largestReportedCount)" }
            return nil
        }
    }
}
