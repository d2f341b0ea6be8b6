import Foundation
import PluginInstall
import Testing

/// SPEC §9: the catalog is signed as a whole, so a server or mirror that is not trusted cannot roll
/// it back, freeze it, or mix plugins. Each attack is refused with its reason, and nothing
/// installed changes.
@Suite(.serialized, .timeLimit(.minutes(4)))
struct CatalogTrustTests {
    /// A home with c.app 1.0.0 installed and 2.0.0 in the shop.
    func world() throws -> (TestWorld, Shop, String) {
        let w = try TestWorld()
        let shop = try Shop(w)
        try FileManager.default.createDirectory(atPath: w.home + "/plugins", withIntermediateDirectories: true)
        try w.bundle("c.app", version: "1.0.0", in: w.home + "/plugins")
        let v2 = try shop.archive("c.app", "2.0.0")
        return (w, shop, v2)
    }

    func config(_ w: TestWorld, _ shop: Shop, extra: [String: Any] = [:], trusted: [Any]? = nil) throws -> String {
        var json: [String: Any] = ["catalog": shop.server.base + "/catalog.json", "trustedKeys": trusted ?? [shop.publisher.publicKeyBase64]]
        for (k, v) in extra { json[k] = v }
        let path = w.root + "/trust-config-\(UUID().uuidString.prefix(6)).json"
        try JSONSerialization.data(withJSONObject: json).write(to: URL(fileURLWithPath: path))
        return path
    }

    /// `update --check`, which loads the catalog: the refusal's text, or nil when accepted.
    func refusal(_ sv: RunningSupervisor) throws -> String? {
        let r = try sv.cli("update", "--check")
        return r.code == 0 ? nil : r.err
    }

    @Test("rollback, an equal version with other bytes, freeze past expires, missing and bad signatures and an unknown key are refused; nothing installed changes")
    func catalogAttacks() throws {
        let (w, shop, v2) = try world()
        try shop.offer("c.app", "2.0.0", archive: v2)  // version 1
        try shop.publishCatalog(version: 5)
        let sv = try RunningSupervisor(w, args: ["--config", try config(w, shop)])
        let installed = w.installed()
        #expect(try refusal(sv) == nil)

        // Rollback: an older version than accepted.
        try shop.publishCatalog(version: 4)
        var why = try #require(try refusal(sv))
        #expect(why.contains("catalogRollback") && why.contains("version 4, older than version 5"), "\(why)")
        // The same version with other bytes (a mix).
        try shop.publishCatalog(version: 5, entries: [])
        why = try #require(try refusal(sv))
        #expect(why.contains("catalogRollback") && why.contains("version 5 again but with other contents"), "\(why)")
        // Freeze: a catalog past its expiry.
        try shop.publishCatalog(version: 6, expires: -60)
        why = try #require(try refusal(sv))
        #expect(why.contains("catalogExpired"), "\(why)")
        // No signature.
        try shop.publishCatalog(version: 7)
        try FileManager.default.removeItem(atPath: shop.dir + "/catalog.json.sig")
        why = try #require(try refusal(sv))
        #expect(why.contains("catalogUnsigned") && why.contains("has no signature"), "\(why)")
        // A signature over other bytes (the catalog was changed after signing).
        try shop.publishCatalog(version: 8)
        let signed = try Data(contentsOf: URL(fileURLWithPath: shop.dir + "/catalog.json"))
        var tampered = signed
        tampered.append(contentsOf: Array(" ".utf8))
        try tampered.write(to: URL(fileURLWithPath: shop.dir + "/catalog.json"))
        why = try #require(try refusal(sv))
        #expect(why.contains("catalogUnsigned") && why.contains("not signed by a trusted publisher key"), "\(why)")
        // Signed, but by a key this host does not trust.
        try shop.publishCatalog(version: 9, signers: [Ed25519.PrivateKey()])
        why = try #require(try refusal(sv))
        #expect(why.contains("not signed by a trusted publisher key"), "\(why)")

        // Nothing of this reached the install: the accepted catalog and the plugin are as they were.
        #expect(w.installed() == installed)
        #expect(try sv.plugin("c.app").version == "1.0.0")
        // And a good catalog is accepted again, with a higher version.
        try shop.publishCatalog(version: 10)
        #expect(try refusal(sv) == nil)
        #expect(try sv.cli("update", "--check").out.contains(#""available":"2.0.0""#))
    }

    @Test("keys: an expired or revoked key is refused by name; a catalog signed by the old and the new key while rotating is accepted")
    func keyLifecycle() throws {
        let (w, shop, v2) = try world()
        try shop.offer("c.app", "2.0.0", archive: v2)
        let publisher = shop.publisher.publicKeyBase64
        let past = ISO8601DateFormatter().string(from: Date().addingTimeInterval(-3600))
        let future = ISO8601DateFormatter().string(from: Date().addingTimeInterval(86_400))

        let expired = try RunningSupervisor(w, args: ["--config", try config(w, shop, trusted: [["key": publisher, "expires": past]])])
        var why = try #require(try refusal(expired))
        #expect(why.contains("catalogUnsigned") && why.contains("expired at \(past)"), "\(why)")
        #expect(try expired.cli("stop").code == 0)
        _ = try expired.waitForExit()

        let revoked = try RunningSupervisor(w, args: ["--config", try config(w, shop, extra: ["revokedKeys": [publisher]])])
        why = try #require(try refusal(revoked))
        #expect(why.contains("revoked"), "\(why)")
        // The archive is refused the same way (its own signature, by the revoked key).
        let install = try revoked.cli("install", shop.server.base + "/" + v2)
        #expect(install.code != 0 && install.err.contains("revoked"), "\(install.err)")
        #expect(w.installed()["c.app"] == "1.0.0")
        #expect(try revoked.cli("stop").code == 0)
        _ = try revoked.waitForExit()

        // Rotation: the new key is trusted (the old one still is, until its end), the catalog carries both signatures.
        let next = Ed25519.PrivateKey()
        let nextPublic = next.publicKey.rawRepresentation.base64EncodedString()
        try shop.publishCatalog(signers: [next, shop.publisher.key])
        let rotating = try RunningSupervisor(w, args: ["--config", try config(w, shop, trusted: [["key": publisher, "expires": future], nextPublic])])
        #expect(try refusal(rotating) == nil)
        #expect(try rotating.cli("stop").code == 0)
        _ = try rotating.waitForExit()
        // The old key revoked, the catalog signed by the new key alone: still accepted.
        try shop.publishCatalog(signers: [next])
        let rotated = try RunningSupervisor(w, args: ["--config", try config(w, shop, extra: ["revokedKeys": [publisher]], trusted: [nextPublic])])
        #expect(try refusal(rotated) == nil)
    }

    @Test("an entry streaming past its length is cut off; an unsigned catalog passes only with catalogSignatures optional, with a warning; an expired cached copy is not used after a 304")
    func lengthMigrationAndCachedExpiry() throws {
        let (w, shop, v2) = try world()
        try shop.offer("c.app", "2.0.0", archive: v2)
        var entries = shop.entries
        entries[0]["length"] = 100
        try shop.publishCatalog(entries: entries)
        let sv = try RunningSupervisor(w, args: ["--config", try config(w, shop)])
        let up = try sv.cli("update")
        #expect(up.out.contains("streams past the 100 bytes"), "\(up.out) \(up.err)")
        #expect(w.installed()["c.app"] == "1.0.0")
        #expect(try sv.plugin("c.app").version == "1.0.0")

        // An expired copy stays unusable even when the server answers 304 Not Modified.
        try shop.publishCatalog(expires: 3)
        #expect(try refusal(sv) == nil)
        let expiry = Date().addingTimeInterval(3.5)
        try sv.waitUntil(timeout: 10, "the catalog to expire") { Date() > expiry }
        let why = try #require(try refusal(sv))
        #expect(why.contains("catalogExpired"), "\(why)")
        #expect(try shop.server.count("/catalog.json", status: 304) >= 1, "the refusal should have come from a 304 on the cached copy")
        #expect(try sv.cli("stop").code == 0)
        _ = try sv.waitForExit()

        // Migration: no .sig, accepted only when the config says optional, and then with a warning.
        try shop.publishCatalog()
        try FileManager.default.removeItem(atPath: shop.dir + "/catalog.json.sig")
        let optional = try RunningSupervisor(w, args: ["--config", try config(w, shop, extra: ["catalogSignatures": "optional"])])
        #expect(try refusal(optional) == nil)
        try optional.waitUntil("the warning") { optional.log.contains("is not signed") && optional.log.contains("catalogSignatures is \"optional\"") }
    }

    @Test("a catalog URL whose server answers 304 to a request that named no version (the cached copy is another URL's, or there is none) is refused naming it; the other URL's copy is not used")
    func notModifiedWithoutACondition() throws {
        let (w, shop, v2) = try world()
        try shop.offer("c.app", "2.0.0", archive: v2)
        let first = try RunningSupervisor(w, args: ["--config", try config(w, shop)])
        #expect(try refusal(first) == nil, "the first URL's catalog is accepted and cached")
        #expect(try first.cli("stop").code == 0)
        _ = try first.waitForExit()
        let moved = try RunningSupervisor(w, args: ["--config", try config(w, shop, extra: ["catalog": shop.server.base + "/not-modified/catalog.json"])])
        let check = try moved.cli("update", "--check")
        #expect(check.code != 0 && check.err.contains("HTTP 304 (not modified) to a request that named no version"), "\(check.out) \(check.err)")
        #expect(!check.out.contains("2.0.0"), "the other URL's catalog was used: \(check.out)")
        #expect(w.installed()["c.app"] == "1.0.0")
    }

    @Test("a bundle whose library or folder others can write is refused at load, with the reason in status; the others run")
    func writableBundlesRefused() throws {
        let w = try TestWorld()
        try w.bundle("p.fine")
        let open = try w.bundle("p.library-open")
        // A copy of the library (the test bundles hard-link the build's), made writable by every user.
        let lib = open + "/libTestKit.so"
        let copy = lib + ".copy"
        try FileManager.default.copyItem(atPath: lib, toPath: copy)
        try FileManager.default.removeItem(atPath: lib)
        try FileManager.default.moveItem(atPath: copy, toPath: lib)
        chmod(lib, 0o757)
        let folder = try w.bundle("p.folder-group")
        chown(folder, getuid(), getgid() + 4242)
        chmod(folder, 0o775)
        let sv = try RunningSupervisor(w)
        #expect(try sv.plugin("p.fine").state == "running")
        let openStatus = try sv.plugin("p.library-open")
        #expect(openStatus.state == "failed" && openStatus.restarts == 0)
        #expect(openStatus.error?.contains("libTestKit.so is writable by every user") == true, "\(openStatus.error ?? "")")
        let groupStatus = try sv.plugin("p.folder-group")
        #expect(groupStatus.state == "failed")
        #expect(groupStatus.error?.contains("writable by group \(getgid() + 4242)") == true, "\(groupStatus.error ?? "")")
        // Fixed, and rescanned: it starts.
        chmod(lib, 0o755)
        #expect(try sv.cli("reload").code == 0)
        try sv.waitUntil("the fixed bundle to run") { try sv.plugin("p.library-open").state == "running" }
    }
}
