import PluginProtocol

/// The calls a plugin has in flight through the supervisor, by the plugin's own id: where each went
/// (its callee, and the callee's id) and the bytes its request weighed. The supervisor holds every
/// one of them until it is answered (a replayable request's whole frame, to send it to the next
/// worker after a crash, SPEC §15), so a plugin calling one that never answers could otherwise grow
/// the supervisor's memory without end: it may have `countLimit` calls or `bytesLimit` bytes of
/// requests in flight, and past either its next call is refused `unavailable` until some are
/// answered (as its calls to the host are, `HostCallRule`).
package struct OutgoingCalls<Callee> {
    /// As many as a peer link serves at once.
    package static var countLimit: Int { 65_536 }
    /// Sixteen of the largest frames (as `UnreadAnswers.bytesLimit`).
    package static var bytesLimit: Int { 256 << 20 }

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

    /// Why `caller` may not send one more request of `size` bytes now, if it may not.
    package func refusal(caller: String, adding size: Int) -> ErrorBody? {
        if entries.count >= Self.countLimit {
            return ErrorBody(.unavailable, "\(caller) has \(entries.count) calls in flight through the supervisor, the most one plugin may; try again when some are answered")
        }
        if bytes + size > Self.bytesLimit {
            return ErrorBody(.unavailable, "\(caller) has \(bytes >> 20) MiB of requests in flight through the supervisor, and this one (\(size) bytes) would pass the \(Self.bytesLimit >> 20) MiB one plugin may have; try again when some are answered")
        }
        return nil
    }
}

/// Input chunks the supervisor holds for one worker's streams: a caller may send the first window
/// (16 chunks) of its input before the reader grants room (SPEC §13), and the supervisor keeps
/// them until it does. A reader that never grants room, called with stream after stream, would
/// have the supervisor hold chunk after chunk: past `limit` bytes held for one worker, the stream
/// whose chunk would go over fails `unavailable` (its caller told, the callee cancelled).
package enum HeldInput {
    /// Sixteen of the largest frames: one stream's whole first window at the largest chunks.
    package static var limit: Int { 256 << 20 }

    /// Why one more chunk of `size` bytes may not be held for `callee`, if it may not.
    package static func refusal(callee: String, held: Int, adding size: Int) -> ErrorBody? {
        guard held + size > limit else { return nil }
        return ErrorBody(.unavailable, "\(callee) has \(held >> 20) MiB of stream input held for it that its readers have not granted room for; this stream's input (a chunk of \(size) bytes) would pass the \(limit >> 20) MiB the supervisor holds for one plugin")
    }
}
