import Foundation
import PluginProtocol
import SupervisorClient
import Testing

/// SPEC §13: bytes up to `limits.maxPayloadMB`, the plugin's own limit in its manifest. Its worker
/// answers a call that brings more with `badRequest` without handing it to the plugin, whichever
/// way the call came: through the supervisor, or over a client's direct link.
extension BytesTests {
    @Test("a plugin's limits.maxPayloadMB: a call bringing more bytes is refused with badRequest naming the limit, through the supervisor and over a client's direct link; smaller bytes, and other plugins, pass; the plugin runs on")
    func pluginsOwnLimit() async throws {
        let w = try TestWorld()
        try w.bundle("b.small", extra: ["limits": ["maxPayloadMB": 1]])
        try w.bundle("b.kit")
        let sup = try RunningSupervisor(w)
        let pid = try sup.plugin("b.small").pid
        let file = w.root + "/two.bin"
        try Data(Self.pattern(2_000_000)).write(to: URL(fileURLWithPath: file))
        let refused = try sup.cli("call", "--input", file, "b.small", "digest")
        #expect(refused.code == 1 && refused.err.hasPrefix("badRequest: ") && refused.err.contains("limits.maxPayloadMB"), "\(refused.err)")
        #expect(try sup.cli("call", "--input", file, "b.kit", "digest").code == 0, "another plugin's limit is the supervisor's")

        let client = try await SupervisorClient.connect(socket: sup.socket)
        defer { client.close() }
        struct DigestParams: Encodable { var data: [String: Int] }
        // Twice: the first call goes through the supervisor, the next over the direct link it hands out.
        for attempt in 0..<2 {
            let big = try AttachedBytes.from(Self.pattern(2_000_000))
            defer { big.close() }
            do {
                _ = try await client.call("b.small", "digest", DigestParams(data: ["$bytes": 0]), sending: [big], as: Digest.self)
                Issue.record("attempt \(attempt): 2 MB reached a plugin whose limit is 1 MiB")
            } catch let error as ErrorBody {
                #expect(error.code == "badRequest" && error.message.contains("limits.maxPayloadMB"), "attempt \(attempt): \(error)")
            }
        }
        let fits = try AttachedBytes.from(Self.pattern(500_000))
        defer { fits.close() }
        #expect(try await client.call("b.small", "digest", DigestParams(data: ["$bytes": 0]), sending: [fits], as: Digest.self)
            == Self.digest(Self.pattern(500_000)))
        let after = try sup.plugin("b.small")
        #expect(after.pid == pid && after.restarts == 0, "\(after)")
    }
}
