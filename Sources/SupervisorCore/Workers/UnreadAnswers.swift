/// A worker that keeps asking but does not read its answers. Every request a worker makes (a
/// call, an open, a host method, a link) is answered on its socket; one that stops reading while
/// its plugin asks on (a blocked I/O thread, a flood of calls to nobody) would have the supervisor
/// hold every answer in memory. Once the socket's outgoing buffer is over its high mark, the
/// requests that come before the worker reads again are counted, and the bytes waiting for it
/// weighed: past either limit it is ended as a protocol violation. A worker that reads, however
/// slowly, never comes near: requests are counted only while its socket stays full.
package struct UnreadAnswers: Sendable, Equatable {
    /// Requests made while its socket stayed full (each adds an answer to what waits).
    package static let requestsLimit = 65_536
    /// Bytes waiting for it: sixteen of the largest frames.
    package static let bytesLimit = 256 << 20

    package private(set) var requestsWhileFull = 0

    package init() {}

    /// A request from the worker. `full`: its socket's outgoing buffer is over its high mark;
    /// `waiting`: the bytes queued for it (asked only while full). Returns why the worker is
    /// ended, or nil.
    package mutating func request(full: Bool, waiting: () -> Int) -> String? {
        guard full else {
            requestsWhileFull = 0
            return nil
        }
        requestsWhileFull += 1
        let bytes = waiting()
        guard requestsWhileFull > Self.requestsLimit || bytes > Self.bytesLimit else { return nil }
        return "it does not read its socket: \(requestsWhileFull) requests made while \(bytes >> 20) MiB of answers waited for it"
            + " (\(Self.requestsLimit) requests or \(Self.bytesLimit >> 20) MiB at most)"
    }
}
