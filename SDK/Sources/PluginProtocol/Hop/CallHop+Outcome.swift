extension CallHop {
    /// How a request to a plugin ended: the `outcome` label of `plugin_calls_total`, and the names
    /// of a `linkCalls` report's counts.
    public enum Outcome: String, CaseIterable, Codable, Sendable {
        case ok, error, timeout, unavailable, denied

        /// The label, as Prometheus and `linkCalls` write it.
        @inlinable public var label: String { rawValue }

        /// Its position in `allCases`, for tables indexed by outcome.
        @inlinable
        public var index: Int {
            switch self {
            case .ok: return 0
            case .error: return 1
            case .timeout: return 2
            case .unavailable: return 3
            case .denied: return 4
            }
        }
    }

    /// The call-duration histogram's buckets (upper bounds, ns), 50 µs to 10 s: a call through the
    /// supervisor takes tens of microseconds, a slow plugin seconds. One more bucket counts what is
    /// past the last bound.
    public static let bucketBounds: [Int64] = [
        50_000, 100_000, 250_000, 500_000, 1_000_000, 2_500_000, 5_000_000, 10_000_000, 25_000_000,
        50_000_000, 100_000_000, 250_000_000, 500_000_000, 1_000_000_000, 2_500_000_000, 5_000_000_000, 10_000_000_000,
    ]

    /// The number of buckets: one per bound, and one past the last.
    public static var bucketCount: Int { bucketBounds.count + 1 }

    /// The bucket a duration falls in: the first whose bound it does not exceed (a bound is
    /// inclusive, as Prometheus's `le`), else the last one.
    @inlinable
    public static func bucket(ofNanoseconds ns: Int64) -> Int {
        bucketBounds.withUnsafeBufferPointer { bounds in
            var i = 0
            while i < bounds.count && ns > bounds[i] { i += 1 }
            return i
        }
    }

    /// Calls counted by outcome, each by its name.
    public struct Counts: Equatable, Sendable {
        public var ok: Int64 = 0
        public var error: Int64 = 0
        public var timeout: Int64 = 0
        public var unavailable: Int64 = 0
        public var denied: Int64 = 0

        public init() {}

        @inlinable
        public subscript(outcome: Outcome) -> Int64 {
            get {
                switch outcome {
                case .ok: return ok
                case .error: return error
                case .timeout: return timeout
                case .unavailable: return unavailable
                case .denied: return denied
                }
            }
            set {
                switch outcome {
                case .ok: ok = newValue
                case .error: error = newValue
                case .timeout: timeout = newValue
                case .unavailable: unavailable = newValue
                case .denied: denied = newValue
                }
            }
        }

        /// Every count added up.
        public var total: Int64 { Outcome.allCases.reduce(0) { $0 &+ self[$1] } }
    }

    /// Answered calls: counts by outcome, durations per bucket and their sum. What a caller's
    /// worker gathers for one callee between two `linkCalls` reports.
    public struct Tally: Equatable, Sendable {
        public var counts = Counts()
        /// Observations per bucket (`bucketBounds`, then one past the last), not cumulative.
        public var buckets = [Int64](repeating: 0, count: CallHop.bucketCount)
        /// Sum of the durations, ns.
        public var sumNs: Int64 = 0

        public init() {}

        public init(counts: Counts, buckets: [Int64], sumNs: Int64) {
            self.counts = counts
            self.buckets = buckets
            self.sumNs = sumNs
        }

        /// Nothing counted.
        public var isEmpty: Bool { counts == Counts() }

        /// One answered call.
        @inlinable
        public mutating func record(_ outcome: Outcome, nanoseconds: Int64) {
            counts[outcome] &+= 1
            buckets[CallHop.bucket(ofNanoseconds: nanoseconds)] &+= 1
            sumNs &+= nanoseconds
        }

        /// Whether it could be a tally of answered calls: as many buckets as the histogram has, no
        /// negative number, as many observations as counts, and no `denied` (a call refused before
        /// it was forwarded has no duration). Nil when it could; else what is wrong.
        public var problem: String? {
            guard buckets.count == CallHop.bucketCount else { return "\(buckets.count) buckets, not \(CallHop.bucketCount)" }
            guard (Outcome.allCases.map { counts[$0] } + buckets + [sumNs]).allSatisfy({ $0 >= 0 }) else { return "a negative number" }
            // A report covers about a second of calls: a count past this could only be made up,
            // and bounded so no sum below can overflow.
            guard (Outcome.allCases.map { counts[$0] } + buckets).allSatisfy({ $0 <= CallHop.largestReportedCount }) else {
                return "a count over \(CallHop.largestReportedCount)"
            }
            guard counts.denied == 0 else { return "denied calls" }
            guard buckets.reduce(0, &+) == counts.total else { return "counts that do not add up" }
            return nil
        }
    }
}

extension CallHop.Counts: Codable {
    /// As an object of the outcomes' names; an outcome it does not name counted none (and is not
    /// written).
    public init(from decoder: Decoder) throws {
        let c = try decoder.container(keyedBy: CallHop.Outcome.CodingKey.self)
        self.init()
        for outcome in CallHop.Outcome.allCases {
            self[outcome] = try c.decodeIfPresent(Int64.self, forKey: .init(outcome)) ?? 0
        }
    }

    public func encode(to encoder: Encoder) throws {
        var c = encoder.container(keyedBy: CallHop.Outcome.CodingKey.self)
        for outcome in CallHop.Outcome.allCases where self[outcome] != 0 {
            try c.encode(self[outcome], forKey: .init(outcome))
        }
    }
}

extension CallHop.Outcome {
    /// An outcome's name as a JSON key.
    public struct CodingKey: Swift.CodingKey {
        public var stringValue: String
        public var intValue: Int? { nil }
        public init(_ outcome: CallHop.Outcome) { stringValue = outcome.rawValue }
        public init?(stringValue: String) { self.stringValue = stringValue }
        public init?(intValue: Int) { nil }
    }
}

extension CallHop {
    /// The most calls (or stream chunks) one `linkCalls` report may count of one kind: far more
    /// than a caller answers between two reports, and small enough that the report's sums and a
    /// long run of them cannot overflow.
    public static let largestReportedCount: Int64 = 1 << 40
}
