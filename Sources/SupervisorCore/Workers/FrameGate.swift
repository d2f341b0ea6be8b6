/// Whether what a worker sends is still acted on. Once a worker broke the protocol (a frame
/// that is not JSON, a message it may not send, a stream beyond its credit), it is killed, and
/// nothing it sent after that moment counts: not a reply (its caller gets the worker's end,
/// `unavailable`), not a call, not a log line. The gate closes once and never opens again.
package struct FrameGate: Sendable, Equatable {
    /// Why it was closed (the first violation), if it was.
    package private(set) var violation: String?

    package init() {}

    /// Frames are acted on.
    package var isOpen: Bool { violation == nil }

    /// A violation: true the first time (the driver kills the worker), false after (it is already
    /// being killed; the later reason is not the one it ends with).
    package mutating func violated(_ why: String) -> Bool {
        guard violation == nil else { return false }
        violation = why
        return true
    }
}
