import CallTracking
import PluginProtocol

/// The values `LinkTable` keeps (LinkTable.swift): its links, the calls in either role and their
/// streams' state.
extension LinkTable {
    /// One link, as the table knows it.
    struct Link {
        let number: UInt64
        /// The other plugin.
        let peer: String
        let isCaller: Bool
        /// Caller role: the callee's timeout, for calls that name none (from the order).
        let timeoutMs: Int
        /// Caller role: the callee's stream idle timeout (from the order).
        let streamIdleMs: Int
        let socket: Socket
        /// Callee role: its word in the taken page (`PeerLinkOrder.markSlot`), if it has one.
        var markSlot: Int?
        /// Caller role: still takes new calls (false once unlinked, or replaced by a newer link).
        var accepting = true
        /// Caller role: calls sent over it and not yet settled.
        var outstanding = 0
        /// Caller role: the supervisor's `unlink` request to answer once `outstanding` is 0.
        var unlinkReply: UInt64?
    }

    /// Callee role: a call as its caller names it, on the link it came over.
    struct CallerKey: Hashable {
        let link: UInt64
        let id: UInt64
    }

    /// Caller role: a call the plugin sent over a link.
    struct OutCall: InFlightEntry {
        let link: UInt64
        var deadline: Instant
        let started: Int64
        /// A call with a stream: what this side keeps of it (docs/protocol.md "Streams").
        var stream: OutStream?
        /// The call as the plugin wrote it, kept to send again through the supervisor if the
        /// link's callee dies with it in flight (SPEC §15); nil for a call with a stream (its
        /// chunks are not kept, so it is not sent again).
        var written: [UInt8]?
    }

    /// Caller role: a call in flight on a link whose callee died, to send again through the
    /// supervisor (`afterLink`), which decides from the link's mark whether it may run.
    struct SentAgain {
        let id: UInt64
        /// The call as the plugin wrote it.
        let written: [UInt8]
        /// Its deadline (CLOCK_MONOTONIC ns): what is left of its time goes with it.
        let deadline: Int64
    }

    /// Caller role: a stream's answer as this worker receives it, checked as the supervisor checks
    /// it (the callee's worker is not trusted): its window, its order, its idle timeout.
    struct OutStream {
        /// The answer's window and order, counted by the rules the supervisor counts them by
        /// (`answers`: it asked for an answer of chunks, else only its input is a stream).
        var credit: StreamCredit
        let idleNs: Int64
        let callDeadline: Int64
    }

    /// Callee role: a call that came over a link, under its local id.
    struct ServedCall {
        let link: UInt64
        let peerID: UInt64
        let socket: Socket
        /// Its input, when it came with one: checked as the supervisor checks a caller's.
        var input: InStream?
    }

    /// Callee role: a call's input as this worker receives it from the caller's.
    struct InStream {
        /// Chunks the caller may still send: what the plugin granted (none at first).
        var credit = 0
        var seq: UInt64 = 0
        var ended = false
    }

    /// What became of a stream frame that came over a link.
    enum StreamArrival: Equatable {
        /// Deliver it to the plugin, under this id.
        case deliver(UInt64)
        /// Its call ended (answered, timed out, cancelled): dropped.
        case late
        /// It breaks the rules: the link ends (its calls fail as the supervisor fails them).
        case violation(String)
    }
}
