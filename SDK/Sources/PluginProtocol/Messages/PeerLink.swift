#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif

/// Peer links (docs/protocol.md "Peer links"): a socket between a calling plugin's worker and the
/// worker of one of its dependencies, so that calls between them skip the supervisor. The supervisor
/// makes each one and hands its ends over the workers' descriptor channel (`WorkerSpec.descriptorChannelFD`), one
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
    /// `caller`: the callee's call timeout, for calls that name none (`CallHop.timeoutMs`).
    public var timeoutMs: Int?
    /// `caller`: the callee's stream idle timeout (`limits.streamIdleTimeoutMs`, else the
    /// supervisor's), for streams over the link (docs/protocol.md "Streams").
    public var streamIdleTimeoutMs: Int?
    /// `callee`: the word of the worker's taken page (SPEC §15) where it keeps the highest id of a
    /// call from this link that it handed to its plugin, so that when it dies the caller's calls
    /// above it go to the next worker (docs/protocol.md "Calls that survive a crash"). Absent: the
    /// supervisor keeps no mark for the link, and every call in flight on it counts as started.
    public var markSlot: Int?

    public init(kind: Kind, peer: String, link: UInt64, timeoutMs: Int? = nil, streamIdleTimeoutMs: Int? = nil, markSlot: Int? = nil) {
        self.kind = kind
        self.peer = peer
        self.link = link
        self.timeoutMs = timeoutMs
        self.streamIdleTimeoutMs = streamIdleTimeoutMs
        self.markSlot = markSlot
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

/// Which call on which direct link a call sent through the supervisor stands for (a `call`'s or an
/// `open`'s `afterLink`, SPEC §15): the link ended with its worker while the call was in flight on
/// it, under `id`. The supervisor replays it if that worker never handed it to its plugin, retries
/// it if its method is idempotent, and otherwise fails it with `started: true`.
public struct AfterLink: Codable, Sendable, Equatable {
    public var link: UInt64
    public var id: UInt64

    public init(link: UInt64, id: UInt64) {
        self.link = link
        self.id = id
    }

    /// `{"link":N,"id":X}`, as a call frame carries it.
    public var json: [UInt8] { Array("{\"link\":\(link),\"id\":\(id)}".utf8) }
}
