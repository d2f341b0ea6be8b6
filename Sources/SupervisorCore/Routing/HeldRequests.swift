import PluginProtocol

/// A control client's frames while its requests wait (`ControlConnection.mostInFlight` of them
/// wait for answers): its next requests wait too, in order, but not what its requests in flight
/// need, or they could never end.
package enum HeldRequests {
    /// Whether a frame of `kind` is a request the client is answered for (it counts among its
    /// requests in flight): not a reply, a cancel, a stream's chunk or credit, or a link report.
    package static func isRequest(_ kind: MessageKind) -> Bool {
        switch kind {
        case .reply, .cancel, .chunk, .credit, .linkCalls: false
        default: true
        }
    }

    package enum Verdict: Equatable, Sendable {
        /// Acted on now.
        case pass
        /// Waits behind what waits already.
        case hold
        /// A cancel of a request that waits: that request goes, unanswered.
        case withdraw
    }

    /// What becomes of a frame of `kind` while requests wait; `aboutHeld`: it names one of them.
    package static func verdict(_ kind: MessageKind, aboutHeld: Bool) -> Verdict {
        switch kind {
        case .cancel: aboutHeld ? .withdraw : .pass
        case .chunk, .credit: aboutHeld ? .hold : .pass
        case _ where isRequest(kind): .hold
        default: .pass
        }
    }
}
