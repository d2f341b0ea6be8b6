import Foundation
import PluginInstall
import Testing

/// `supervisor-installer publish` (docs/install.md#publishing-for-a-fleet): the publisher's whole
/// path in one command, from a bundle folder to a signed catalog that a fleet's `supervisor update`
/// takes; and bad input refused by name, with the catalog left as it was.
@Suite(.serialized, .timeLimit(.minutes(4)))
struct PublishTests {
    static var installer: String { Build.dir + "/supervisor-installer" }

    func tool(_ args: String...) throws -> Shell.Result { try Shell.run(Self.installer, args, timeout: 120) }

    /// The catalog document as a host would read it.
    func catalog(_ path: String) throws -> [String: Any] {
        try #require(try JSONSerialization.jsonObject(with: Data(contentsOf: URL(fileURLWithPath: path))) as? [String: Any])
    }

    func bytes(_ path: String) -> Data? { FileManager.default.contents(atPath: path) }

    @Test("publish makes the archive, its signature and the signed catalog; `supervisor update` installs it; a second publish raises the catalog's version and the fleet takes that too")
    func publishThenUpdate() throws {
        let w = try TestWorld()
        let shop = w.root + "/shop"
        try FileManager.default.createDirectory(atPath: shop, withIntermediateDirectories: true)
        let server = try WebServer(root: shop)
        let key = w.root + "/publisher.key"
        let keygen = try tool("keygen", key)
        #expect(keygen.code == 0, "\(keygen.err)")
        let publicKey = keygen.out.trimmingCharacters(in: .whitespacesAndNewlines)

        // A host running c.app 1.0.0, trusting the key, with the shop's catalog.
        try FileManager.default.createDirectory(atPath: w.home + "/plugins", withIntermediateDirectories: true)
        try w.bundle("c.app", version: "1.0.0", in: w.home + "/plugins")
        let config = w.root + "/publish-config.json"
        let settings: [String: Any] = ["catalog": server.base + "/catalog.json", "trustedKeys": [publicKey], "updateGraceSeconds": 1]
        try JSONSerialization.data(withJSONObject: settings).write(to: URL(fileURLWithPath: config))

        // The publisher's folder for 2.0.0, with a build folder that must stay out of the archive.
        let v2 = try w.bundle("c.app", version: "2.0.0", folder: "c.app-2.0.0", in: w.root + "/src")
        try FileManager.default.createDirectory(atPath: v2 + "/.build", withIntermediateDirectories: true)
        try "not for the fleet".write(toFile: v2 + "/.build/junk", atomically: true, encoding: .utf8)
        let first = try tool("publish", v2, "--key", key, "--catalog", shop + "/catalog.json")
        #expect(first.code == 0, "\(first.err)")
        #expect(first.out.contains("published c.app 2.0.0 (new in the catalog)"), "\(first.out)")

        // What a host will check: length and sha256 of the archive, its signature, the catalog's version and expiry.
        let archive = shop + "/c.app-2.0.0.tar.gz"
        let archiveBytes = try #require(bytes(archive))
        var document = try catalog(shop + "/catalog.json")
        #expect(document["version"] as? Int == 1)
        let expires = try #require(ISO8601DateFormatter().date(from: document["expires"] as? String ?? ""))
        #expect(abs(expires.timeIntervalSinceNow - 7 * 86_400) < 600, "expires \(expires) should be 7 days ahead")
        var entries = try #require(document["plugins"] as? [[String: Any]])
        #expect(entries.count == 1)
        #expect(entries.first?["url"] as? String == "c.app-2.0.0.tar.gz")
        #expect(entries.first?["length"] as? Int == archiveBytes.count)
        #expect(entries.first?["sha256"] as? String == SHA256.hash(data: archiveBytes).map { String(format: "%02x", $0) }.joined())
        let signatureText = try #require(bytes(archive + ".sig"))
        let signature = try #require(Data(base64Encoded: String(decoding: signatureText, as: UTF8.self).trimmingCharacters(in: .whitespacesAndNewlines)))
        let publisher = try Ed25519.PublicKey(rawRepresentation: try #require(Data(base64Encoded: publicKey)))
        #expect(publisher.isValidSignature(signature, for: archiveBytes))

        // The fleet: one host's `supervisor update` takes it.
        let sv = try RunningSupervisor(w, args: ["--config", config])
        #expect(try sv.plugin("c.app").version == "1.0.0")
        let up = try sv.cli("update")
        #expect(up.code == 0, "\(up.out) \(up.err)")
        #expect(up.out.contains("c.app 2.0.0 (was 1.0.0)"), "\(up.out)")
        try sv.waitUntil("c.app 2.0.0 running") { let p = try sv.plugin("c.app"); return p.state == "running" && p.version == "2.0.0" }
        #expect(!FileManager.default.fileExists(atPath: w.home + "/plugins/c.app/.build"), "the dot-folder went into the archive")

        // 2.1.0 with --base-url and --expires: the catalog's version goes up (the host refuses a
        // catalog whose version does not), the other fields follow, and the host takes it.
        let v21 = try w.bundle("c.app", version: "2.1.0", folder: "c.app-2.1.0", in: w.root + "/src")
        let second = try tool("publish", v21, "--key", key, "--catalog", shop + "/catalog.json", "--base-url", server.base + "/", "--expires", "2")
        #expect(second.code == 0, "\(second.err)")
        #expect(second.out.contains("published c.app 2.1.0 (the catalog had 2.0.0)"), "\(second.out)")
        document = try catalog(shop + "/catalog.json")
        #expect(document["version"] as? Int == 2)
        entries = try #require(document["plugins"] as? [[String: Any]])
        #expect(entries.count == 1)
        #expect(entries.first?["url"] as? String == server.base + "/c.app-2.1.0.tar.gz")
        #expect(try String(contentsOfFile: shop + "/catalog.json.sig", encoding: .utf8).split(separator: "\n").count == 1)
        let check = try sv.cli("update", "--check")
        #expect(check.out.contains(#""available":"2.1.0""#), "\(check.out) \(check.err)")
        let again = try sv.cli("update")
        #expect(again.code == 0 && again.out.contains("c.app 2.1.0 (was 2.0.0)"), "\(again.out) \(again.err)")
        try sv.waitUntil("c.app 2.1.0 running") { let p = try sv.plugin("c.app"); return p.state == "running" && p.version == "2.1.0" }
        #expect(w.installed()["c.app"] == "2.1.0")
    }

    @Test("bad input: a missing folder, a broken manifest, a missing library, a bad key, a catalog signed by another key or not at all, an older or changed version, bad options: each named with its reason, and the catalog, its signature and the folder left as they were")
    func refusals() throws {
        let w = try TestWorld()
        let shop = w.root + "/shop"
        try FileManager.default.createDirectory(atPath: shop, withIntermediateDirectories: true)
        let key = w.root + "/publisher.key", other = w.root + "/other.key"
        #expect(try tool("keygen", key).code == 0)
        #expect(try tool("keygen", other).code == 0)
        let good = try w.bundle("c.app", version: "2.0.0", folder: "good", in: w.root + "/src")
        let catalogPath = shop + "/catalog.json"
        #expect(try tool("publish", good, "--key", key, "--catalog", catalogPath).code == 0)
        let before = (bytes(catalogPath), bytes(catalogPath + ".sig"), try FileManager.default.contentsOfDirectory(atPath: shop).sorted())

        func refused(_ args: [String], _ expected: [String], code: Int32 = 2, sourceLocation: SourceLocation = #_sourceLocation) throws {
            let r = try Shell.run(Self.installer, ["publish"] + args, timeout: 120)
            #expect(r.code == code, "\(args): exit \(r.code) \(r.err)", sourceLocation: sourceLocation)
            for text in expected { #expect(r.err.contains(text), "\(args): \(r.err)", sourceLocation: sourceLocation) }
            #expect(bytes(catalogPath) == before.0 && bytes(catalogPath + ".sig") == before.1, "\(args) changed the catalog", sourceLocation: sourceLocation)
            #expect(try FileManager.default.contentsOfDirectory(atPath: shop).sorted() == before.2, "\(args) left files behind", sourceLocation: sourceLocation)
        }

        try refused([w.root + "/nowhere", "--key", key, "--catalog", catalogPath], ["the bundle folder \(w.root)/nowhere does not exist"])
        let broken = try w.bundle("c.app", version: "3.0.0", folder: "broken", in: w.root + "/src")
        try #"{"identifier": "c.app", "version": "3.0", "library": "libTestKit.so"}"#.write(toFile: broken + "/plugin.json", atomically: true, encoding: .utf8)
        try refused([broken, "--key", key, "--catalog", catalogPath], ["invalidManifest", "\(broken)/plugin.json", "version"])
        let noLibrary = try w.bundle("c.app", version: "3.0.0", folder: "nolib", in: w.root + "/src")
        try FileManager.default.removeItem(atPath: noLibrary + "/libTestKit.so")
        try refused([noLibrary, "--key", key, "--catalog", catalogPath], ["names the library 'libTestKit.so'", "is not there"])
        try "not a key\n".write(toFile: w.root + "/bad.key", atomically: true, encoding: .utf8)
        try refused([good, "--key", w.root + "/bad.key", "--catalog", catalogPath], ["the key \(w.root)/bad.key is not a private key"])
        try refused([good, "--key", w.root + "/missing.key", "--catalog", catalogPath], ["cannot read the key \(w.root)/missing.key"])
        try refused([good, "--key", other, "--catalog", catalogPath], ["catalogUnsigned", "is not signed by the key \(other)"])
        let older = try w.bundle("c.app", version: "1.5.0", folder: "older", in: w.root + "/src")
        try refused([older, "--key", key, "--catalog", catalogPath], ["versionRefused", "offers c.app 2.0.0, newer than this bundle's 1.5.0"])
        let changed = try w.bundle("c.app", version: "2.0.0", folder: "changed", extra: ["restart": "always"], in: w.root + "/src")
        try refused([changed, "--key", key, "--catalog", catalogPath], ["already offers c.app 2.0.0 with other contents"])
        let link = try w.bundle("c.app", version: "3.0.0", folder: "link", in: w.root + "/src")
        try FileManager.default.createSymbolicLink(atPath: link + "/passwd", withDestinationPath: "/etc/passwd")
        try refused([link, "--key", key, "--catalog", catalogPath], ["archiveRefused", "\(link)/passwd", "absolute path '/etc/passwd'"])
        try refused([good, "--key", key, "--catalog", catalogPath, "--expires", "0"], ["--expires 0"], code: 64)
        try refused([good, "--key", key, "--catalog", catalogPath, "--base-url", "ftp://example"], ["--base-url 'ftp://example'"], code: 64)
        try refused([good, "--catalog", catalogPath], ["publish needs --key"], code: 64)

        // Changed after signing: refused, not re-signed.
        var tampered = try #require(before.0)
        tampered.append(contentsOf: Array(" ".utf8))
        try tampered.write(to: URL(fileURLWithPath: catalogPath))
        let r = try tool("publish", good, "--key", key, "--catalog", catalogPath)
        #expect(r.code == 2 && r.err.contains("is not signed by the key"), "\(r.err)")
        #expect(bytes(catalogPath) == tampered)
        // Unsigned: refused, with the command that signs it.
        try FileManager.default.removeItem(atPath: catalogPath + ".sig")
        let unsigned = try tool("publish", good, "--key", key, "--catalog", catalogPath)
        #expect(unsigned.code == 2 && unsigned.err.contains("has no signature") && unsigned.err.contains("supervisor-installer sign"), "\(unsigned.err)")
    }
}
