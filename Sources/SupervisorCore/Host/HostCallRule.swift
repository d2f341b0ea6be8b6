import PluginProtocol

/// Whether a plugin's call to a method of the program the supervisor runs in (`@host`, SPEC §12)
/// goes to the program: the caller's permission, a provider for the method, an id not already in
/// flight, and room under the caller's in-flight limit, checked in that order.
package enum HostCallRule {
    /// A refused call: the error the caller gets, and how it counts.
    package struct Refusal: Equatable, Sendable {
        package var error: ErrorBody
        package var outcome: CallHop.Outcome

        package init(error: ErrorBody, outcome: CallHop.Outcome) {
            self.error = error
            self.outcome = outcome
        }
    }

    /// A plugin cannot grow the host's memory by calling in a loop: at most this many of its calls
    /// to the host are in flight at once.
    package static let inFlightLimit = 64

    package static func check(method: String, caller: String, permissions: [Permission], provided: Bool,
                              id: UInt64, idInFlight: Bool, inFlight: Int, limit: Int = inFlightLimit) -> Refusal? {
        guard Permission.allowsHostCall(method, in: permissions) else {
            return Refusal(error: ErrorBody(.denied, "\(caller) may not call the host's \(method): its manifest needs the permission host.call:\(method)"),
                           outcome: .denied)
        }
        guard provided else { return Refusal(error: ErrorBody(.notFound, "the host provides no method \(method)"), outcome: .unavailable) }
        guard !idInFlight else { return Refusal(error: ErrorBody(.badRequest, "call id \(id) to the host is already in flight"), outcome: .error) }
        guard inFlight < limit else {
            return Refusal(error: ErrorBody(.unavailable, "\(caller) has \(limit) calls to the host in flight; try again when they are answered"),
                           outcome: .unavailable)
        }
        return nil
    }
}
