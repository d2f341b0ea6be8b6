#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif

/// Call timeouts the supervisor and the workers agree on: the default for a call that names none
/// (`callTimeoutMs` in the configuration starts here) and the longest a call may ask for (a day;
/// also what stands for "no timeout" in debug mode).
public enum CallTimeouts {
    public static let defaultMs = 30_000
    public static let longestMs = 24 * 3_600_000
}

/// Peer links (docs/protocol.md "Peer links"): a socket between a calling plugin's worker and the
/// worker of one of its dependencies, so that calls between them skip the supervisor. The supervisor
/// makes each one and hands its ends over the workers' second channel (`WorkerSpec.notifyFD`), one
/// order a message: a 4-byte big-endian length, then this object as JSON; a `caller` or `callee`
/// order carries the link's socket (SCM_RIGHTS) on its first byte.
public struct PeerLinkOrder: Codable, Sendable, Equatable {
    public enum Kind: String, Codable, Sendable {
        /// Here is a link to `peer`: send your plugin's calls to it over this socket.
        case caller
        /// Here is a link from `peer`: serve the calls that come over this socket.
        case callee
    }

    public var kind: Kind
    /// The other plugin's identifier.
    public var peer: String
    /// The supervisor's number for this link.
    public var link: UInt64
    /// `caller`: the callee's call timeout, for calls that name none.
    public var timeoutMs: Int?
    /// `caller`: the bounds (ns) of the call-duration histogram the worker reports in (`LinkCallsReport`).
    public var bucketBounds: [Int64]?

    public init(kind: Kind, peer: String, link: UInt64, timeoutMs: Int? = nil, bucketBounds: [Int64]? = nil) {
        self.kind = kind
        self.peer = peer
        self.link = link
        self.timeoutMs = timeoutMs
        self.bucketBounds = bucketBounds
    }

    /// Largest order accepted (they are small; anything larger is not from the supervisor).
    public static let maxBytes = 64 * 1024
}

/// `unlink` (supervisor → worker, on the protocol socket, so it can never be lost): stop sending
/// calls over link `link` to `peer` (they go through the supervisor again, which queues them for
/// `peer`'s next worker), and once every call already sent over it is answered or has timed out,
/// close it and reply to `id`: the supervisor is draining `peer` (SPEC §8). A link order that comes
/// after its unlink (they travel on two sockets) is closed at once.
public struct UnlinkMessage: Codable, Sendable, Equatable {
    public var type = MessageKind.unlink
    public var id: UInt64
    public var peer: String
    public var link: UInt64

    public init(id: UInt64, peer: String, link: UInt64) {
        self.id = id
        self.peer = peer
        self.link = link
    }

    private static let prefix = Array(#"{"type":"unlink""#.utf8)

    /// Whether `body` is one (the supervisor writes `type` first, as every frame it builds).
    public static func starts(_ body: UnsafeRawBufferPointer) -> Bool {
        body.count > prefix.count && prefix.withUnsafeBytes { p in body.starts(with: p) }
    }
}

/// `linkCalls` (worker → supervisor): what a caller's worker saw of the calls it sent over its link
/// to `target` since its last report, so the callee's `plugin_calls_total` and
/// `plugin_call_duration_seconds` count them as if the supervisor had forwarded them.
public struct LinkCallsReport: Codable, Sendable, Equatable {
    public var type = MessageKind.linkCalls
    public var target: String
    /// Answered calls by outcome: ok, error, timeout, unavailable.
    public var counts: [Int64]
    /// Durations per histogram bucket (the order's `bucketBounds`, then one past the last bound).
    public var buckets: [Int64]
    /// Sum of the durations, ns.
    public var sumNs: Int64
    /// The link to `target` with this number ended by itself (its other end closed, or it broke):
    /// the supervisor may make a new one.
    public var endedLink: UInt64?

    public init(target: String, counts: [Int64], buckets: [Int64], sumNs: Int64, endedLink: UInt64? = nil) {
        self.target = target
        self.counts = counts
        self.buckets = buckets
        self.sumNs = sumNs
        self.endedLink = endedLink
    }
}
