import PluginProtocol

/// The calls a plugin has in flight through the supervisor, by the plugin's own id: where each went
/// (its callee, and the callee's id) and the bytes its request weighed. The supervisor holds every
/// one of them until it is answered (a replayable request's whole frame, to send it to the next
/// worker after a crash, SPEC §15), so a plugin calling one that never answers could otherwise grow
/// the supervisor's memory without end: a worker may have `countLimit` calls, or `HeldBytes.limit`
/// of requests, in flight, and past either its next call is refused `unavailable` until some are
/// answered (as its calls to the host are, `HostCallRule`). One request is always let through
/// when none is in flight, however large.
package struct OutgoingCalls<Callee> {
    /// As many as a peer link serves at once.
    package static var countLimit: Int { 65_536 }

    private var entries: [UInt64: (callee: Callee, id: UInt64, bytes: Int)] = [:]
    /// The bytes of the requests in flight.
    package private(set) var bytes = 0

    package init() {}

    package var count: Int { entries.count }
    package var isEmpty: Bool { entries.isEmpty }

    package subscript(callerID: UInt64) -> (callee: Callee, id: UInt64)? {
        entries[callerID].map { ($0.callee, $0.id) }
    }

    /// Call `callerID` went to `callee` as its `id`, a request of `bytes` (sent again after a
    /// crash, it replaces its first entry).
    package mutating func add(_ callerID: UInt64, callee: Callee, id: UInt64, bytes size: Int) {
        remove(callerID)
        entries[callerID] = (callee, id, size)
        bytes += size
    }

    /// Call `callerID` was answered or given up: where it was, if it was in flight.
    @discardableResult
    package mutating func remove(_ callerID: UInt64) -> (callee: Callee, id: UInt64)? {
        guard let entry = entries.removeValue(forKey: callerID) else { return nil }
        bytes -= entry.bytes
        return (entry.callee, entry.id)
    }

    /// Every call in flight, taken (its caller ended).
    package mutating func removeAll() -> [UInt64: (callee: Callee, id: UInt64)] {
        defer { entries = [:]; bytes = 0 }
        return entries.mapValues { ($0.callee, $0.id) }
    }

    /// Why `caller` may not send one more request of `size` bytes now, if it may not; `limit`:
    /// the bytes one worker may have in flight (`HeldBytes.limit`).
    package func refusal(caller: String, adding size: Int, limit: Int) -> ErrorBody? {
        if entries.count >= Self.countLimit {
            return ErrorBody(.unavailable, "\(caller) has \(entries.count) calls in flight through the supervisor, the most one worker may; try again when some are answered")
        }
        if bytes > 0, bytes + size > limit {
            return ErrorBody(.unavailable, "\(caller) has \(bytes >> 20) MiB of requests in flight through the supervisor, and this one (\(size) bytes) would pass the \(limit >> 20) MiB one worker may have; try again when some are answered")
        }
        return nil
    }
}

/// How much the supervisor holds for one worker's requests in flight, for one worker's stream
/// input, or for one control client (its answers unread, its streams' input while their calls wait):
/// sixteen of the largest frames (`maxFrameBytes`), one stream's whole window at the largest chunks,
/// and 256 MiB at least.
package enum HeldBytes {
    package static func limit(maxFrameBytes: Int) -> Int { max(256 << 20, 16 * maxFrameBytes) }
}

/// Input chunks the supervisor holds for one worker's streams: a caller may send the first window
/// (16 chunks) of its input before the reader grants room (SPEC §13), and the supervisor keeps
/// them until it does. A reader that never grants room, called with stream after stream, would
/// have the supervisor hold chunk after chunk: past `limit` (`HeldBytes.limit`) held for one
/// worker, the stream whose chunk would go over fails `unavailable` (its caller told, the callee
/// cancelled). A chunk is always held when nothing else is.
package enum HeldInput {
    /// Why one more chunk of `size` bytes may not be held for `holder` (a worker's readers, or,
    /// `waiting`, the calls of one client that wait for their plugin to start), if it may not.
    package static func refusal(holder: String, held: Int, adding size: Int, limit: Int, waiting: Bool = false) -> ErrorBody? {
        guard held > 0, held + size > limit else { return nil }
        let whose = waiting ? "for its calls that wait for their plugin to start" : "for it that no reader has granted room for"
        return ErrorBody(.unavailable, "\(holder) has \(held >> 20) MiB of stream input held \(whose); this stream's input (a chunk of \(size) bytes) would pass the \(limit >> 20) MiB the supervisor holds")
    }
}
