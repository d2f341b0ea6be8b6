import PluginProtocol
import SupervisorCore
import Testing

/// A control client's frames while its requests wait for room (Routing/HeldRequests.swift).
@Suite struct HeldRequestsTests {
    @Test("requests wait; what requests in flight need goes on")
    func requestsWaitTheRestGoesOn() {
        for kind in [MessageKind.call, .open, .status, .send, .restart, .metrics] {
            #expect(HeldRequests.isRequest(kind) && HeldRequests.verdict(kind, aboutHeld: false) == .hold, "\(kind)")
        }
        for kind in [MessageKind.reply, .cancel, .chunk, .credit, .linkCalls] {
            #expect(!HeldRequests.isRequest(kind) && HeldRequests.verdict(kind, aboutHeld: false) == .pass, "\(kind)")
        }
    }

    @Test("about a request that waits: its chunks and credit wait behind it, its cancel takes it out")
    func aboutAHeldRequest() {
        #expect(HeldRequests.verdict(.chunk, aboutHeld: true) == .hold)
        #expect(HeldRequests.verdict(.credit, aboutHeld: true) == .hold)
        #expect(HeldRequests.verdict(.cancel, aboutHeld: true) == .withdraw)
        #expect(HeldRequests.verdict(.reply, aboutHeld: true) == .pass)
    }
}
