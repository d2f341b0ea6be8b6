import Foundation
import Testing

/// SPEC §9: a catalog "served over HTTP(S) or `file://`", and archives named by `file://` URLs,
/// read by the installer from inside its own sandbox (Landlock lets it read exactly those files).
extension InstallTests {
    @Test("file:// URLs: an archive installed from one, a catalog read from one and the update it offers (a relative entry), each through the installer's sandbox")
    func fileURLs() throws {
        let w = try TestWorld()
        let shop = try Shop(w)
        let v1 = try shop.archive("f.app", "1.0.0")
        let v2 = try shop.archive("f.app", "2.0.0", kind: "zip")
        let sv = try start(w, config: try shop.config(catalog: "file://" + shop.dir + "/catalog.json"))

        let installed = try sv.cli("install", "file://" + shop.dir + "/" + v1)
        #expect(installed.code == 0 && installed.out.contains("f.app 1.0.0"), "\(installed.out)\(installed.err)")
        #expect(try sv.plugin("f.app").state == "running")
        // The same version again is installed again (SPEC §9 refuses only a lower one): a new worker, nothing else.
        let firstPID = try sv.plugin("f.app").pid
        let again = try sv.cli("install", "file://" + shop.dir + "/" + v1)
        #expect(again.code == 0 && again.out.contains("f.app 1.0.0"), "\(again.out)\(again.err)")
        let reinstalled = try sv.plugin("f.app")
        #expect(reinstalled.state == "running" && reinstalled.version == "1.0.0" && reinstalled.pid != firstPID, "\(reinstalled)")

        try shop.offer("f.app", "2.0.0", archive: v2)
        let check = try sv.cli("update", "--check")
        #expect(check.code == 0 && check.out.contains(#""available":"2.0.0""#), "\(check.out)\(check.err)")
        let up = try sv.cli("update")
        #expect(up.code == 0 && up.out.contains("f.app 2.0.0 (was 1.0.0)"), "\(up.out)\(up.err)")
        #expect(try sv.plugin("f.app").version == "2.0.0")
        #expect(try sv.call("f.app", "echo", "5", as: Int.self) == 5)
    }

    @Test("a .sig of the 64 raw bytes of an Ed25519 signature (as openssl and most libraries write one) is accepted beside base64 text, for an archive and a catalog")
    func rawSignatures() throws {
        let w = try TestWorld()
        let shop = try Shop(w)
        let v1 = try shop.archive("r.app", "1.0.0")
        let v2 = try shop.archive("r.app", "2.0.0")
        try shop.offer("r.app", "2.0.0", archive: v2)
        func toRaw(_ path: String) throws {
            let text = try String(contentsOfFile: path, encoding: .utf8).trimmingCharacters(in: .whitespacesAndNewlines)
            let raw = try #require(Data(base64Encoded: text))
            #expect(raw.count == 64)
            try raw.write(to: URL(fileURLWithPath: path))
        }
        try toRaw(shop.dir + "/" + v1 + ".sig")
        try toRaw(shop.dir + "/catalog.json.sig")
        let sv = try start(w, config: try shop.config())
        let installed = try sv.cli("install", shop.server.base + "/" + v1)
        #expect(installed.code == 0 && installed.out.contains("r.app 1.0.0"), "\(installed.out)\(installed.err)")
        let check = try sv.cli("update", "--check")
        #expect(check.code == 0 && check.out.contains(#""available":"2.0.0""#), "\(check.out)\(check.err)")
    }
}
