import Testing
import SupervisorCore

/// Whether a plugin's call to the host's methods goes through (Host/HostCallRule.swift).
@Suite struct HostCallRuleTests {
    static func check(method: String = "greet", permissions: [Permission] = [.hostCall("greet")], provided: Bool = true,
                      idInFlight: Bool = false, inFlight: Int = 0) -> HostCallRule.Refusal? {
        HostCallRule.check(method: method, caller: "p", permissions: permissions, provided: provided, id: 7, idInFlight: idInFlight,
                           inFlight: inFlight)
    }

    @Test func withThePermissionAndAProviderItGoes() {
        #expect(Self.check() == nil)
    }

    @Test func withoutThePermissionItIsDeniedNamingThePermission() {
        let refused = Self.check(permissions: [])
        #expect(refused?.outcome == .denied)
        #expect(refused?.error == ErrorBody(.denied, "p may not call the host's greet: its manifest needs the permission host.call:greet"))
    }

    @Test func thePermissionIsCheckedBeforeTheProvider() {
        #expect(Self.check(permissions: [], provided: false)?.outcome == .denied, "an unpermitted caller learns nothing of what is provided")
    }

    @Test func aMethodNobodyProvidesIsNotFound() {
        #expect(Self.check(provided: false) == HostCallRule.Refusal(error: ErrorBody(.notFound, "the host provides no method greet"), outcome: .unavailable))
    }

    @Test func anIdAlreadyInFlightIsABadRequest() {
        #expect(Self.check(idInFlight: true)?.error == ErrorBody(.badRequest, "call id 7 to the host is already in flight"))
    }

    @Test func theInFlightLimitHolds() {
        #expect(Self.check(inFlight: HostCallRule.inFlightLimit - 1) == nil)
        #expect(Self.check(inFlight: HostCallRule.inFlightLimit)?.error.code == "unavailable")
    }
}
