import PluginProtocol

/// Install and update requests between their arrival and their answer. Their work runs off the
/// loop (a download can take minutes), and a supervisor that stops meanwhile closes its control
/// socket once its plugins have stopped: each request still waiting is answered first, saying what
/// was not done (`Installs.answerUnfinished`), and what its work brings back later is dropped: a
/// staged bundle is removed, never swapped in after its client was told it was not installed.
/// `Origin` is where a request is answered (the driver's connection and request id).
package struct UnansweredInstalls<Origin> {
    private struct Waiting {
        let origin: Origin
        /// What the request does, for its answer: "the install of <source>", "the update".
        let what: String
        /// What it has done so far (an update's plugins updated before the stop).
        var done: [String] = []
    }

    private var waiting: [UInt64: Waiting] = [:]
    private var next: UInt64 = 0

    package init() {}

    /// No request waits.
    package var isEmpty: Bool { waiting.isEmpty }

    /// `origin`'s request waits from now on; the ticket names it.
    package mutating func add(_ origin: Origin, _ what: String) -> UInt64 {
        next &+= 1
        waiting[next] = Waiting(origin: origin, what: what)
        return next
    }

    /// Whether `ticket`'s request still waits: false once the stop has answered it.
    package func waits(_ ticket: UInt64) -> Bool { waiting[ticket] != nil }

    /// `ticket`'s request has done `step` (an update: one plugin updated).
    package mutating func did(_ step: String, for ticket: UInt64) {
        waiting[ticket]?.done.append(step)
    }

    /// The origin to answer `ticket`'s request at, once: nil when the stop answered it already.
    package mutating func take(_ ticket: UInt64) -> Origin? {
        waiting.removeValue(forKey: ticket)?.origin
    }

    /// Every request still waiting, taken, with the answer a stop gives it.
    package mutating func takeAll() -> [(Origin, ErrorBody)] {
        defer { waiting.removeAll() }
        return waiting.sorted { $0.key < $1.key }.map { _, request in
            let done = request.done.isEmpty ? "nothing changed" : "done before it: " + request.done.joined(separator: ", ")
            return (request.origin, ErrorBody(.unavailable, "the supervisor stopped before \(request.what) ended (\(done))"))
        }
    }
}
