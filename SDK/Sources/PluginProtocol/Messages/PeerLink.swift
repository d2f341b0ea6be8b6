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

    public init(kind: Kind, peer: String, link: UInt64, timeoutMs: Int? = nil, streamIdleTimeoutMs: Int? = nil) {
        self.kind = kind
        self.peer = peer
        self.link = link
        self.timeoutMs = timeoutMs
        self.streamIdleTimeoutMs = streamIdleTimeoutMs
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
