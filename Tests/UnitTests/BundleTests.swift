import Foundation
@testable import Bundles
@testable import BundleModel
import LinuxSupport
import Testing

@Suite struct SemanticVersionTests {
    @Test func ordering() throws {
        let ordered = ["1.0.0-alpha", "1.0.0-alpha.1", "1.0.0-alpha.beta", "1.0.0-beta", "1.0.0-beta.2", "1.0.0-beta.11",
                       "1.0.0-rc.1", "1.0.0", "1.9.0", "1.10.0", "2.0.0"]
        let versions = try ordered.map { try #require(SemanticVersion($0)) }
        for (a, b) in zip(versions, versions.dropFirst()) { #expect(a < b, "\(a) < \(b)") }
        #expect(SemanticVersion("1.0.0-alpha.2")! < SemanticVersion("1.0.0-alpha.10")!)
        #expect(SemanticVersion("1.0.0+build.1") == SemanticVersion("1.0.0+other"))
    }

    @Test(arguments: ["01.0.0", "1.0", "1", "1.0.0-", "1.0.0-01", "1.0.0+", "v1.0.0", "1.0.0-a..b", "", "1.0.0.0", "-1.0.0"])
    func rejects(_ text: String) {
        #expect(SemanticVersion(text) == nil)
    }

    @Test func rangesAtTheLargestVersionsDoNotOverflow() throws {
        // Found by FuzzManifest: these trapped on `+ 1`.
        let max = UInt64.max
        #expect(try #require(VersionRange("^\(max).0.0")).contains(SemanticVersion(max, 5, 0)))
        #expect(try #require(VersionRange("~1.\(max).0")).contains(SemanticVersion(1, max, 3)))
        #expect(try #require(VersionRange("^0.0.\(max)")).contains(SemanticVersion(0, 0, max)))
        #expect(try #require(VersionRange("^0.\(max).0")).contains(SemanticVersion(0, max, 7)))
    }

    @Test func ranges() throws {
        let r = try #require(VersionRange(">=1.2.0 <2.0.0"))
        #expect(r.contains(SemanticVersion("1.2.0")!))
        #expect(r.contains(SemanticVersion("1.99.0")!))
        #expect(!r.contains(SemanticVersion("2.0.0")!))
        #expect(!r.contains(SemanticVersion("1.1.9")!))
        #expect(VersionRange("^1.2.3")!.contains(SemanticVersion("1.9.0")!))
        #expect(!VersionRange("^1.2.3")!.contains(SemanticVersion("2.0.0")!))
        #expect(!VersionRange("^0.2.3")!.contains(SemanticVersion("0.3.0")!))
        #expect(VersionRange("~1.2.3")!.contains(SemanticVersion("1.2.9")!))
        #expect(!VersionRange("~1.2.3")!.contains(SemanticVersion("1.3.0")!))
        #expect(VersionRange("1.2.3")!.contains(SemanticVersion("1.2.3")!))
        #expect(VersionRange("*")!.contains(SemanticVersion("9.9.9")!))
        #expect(VersionRange(">=banana") == nil)
    }
}

@Suite struct ManifestTests {
    func parse(_ json: String) throws(ManifestError) -> Manifest {
        try Manifest.parse(Array(json.utf8), bundle: "/b", file: "/b/plugin.json")
    }

    /// Unknown fields are ignored (SPEC §2), but one a case or a letter or two away from a field
    /// is said, with the field meant; others (a description, a newer manifest's field) are not.
    @Test func misspelledFieldsAreSaidUnknownOnesAreNot() throws {
        let m = try parse(#"""
            {"identifier": "a.b", "version": "1.0.0", "library": "l.so", "permission": ["network"], "dependancies": [],
             "limits": {"callTimeoutMS": 100, "memoryMb": 64, "memoryMB": 64}, "resources": {"baseURL": "https://x", "file": []},
             "variants_": 1, "description": "a plugin", "futureField": {"callTimeoutMS": 1}, "idleStopMS": 5}
            """#)
        #expect(m.notes == [
            "/b/plugin.json: field 'dependancies' is not a manifest field and is ignored; did you mean 'dependencies'?",
            "/b/plugin.json: field 'idleStopMS' is not a manifest field and is ignored; did you mean 'idleStopMs'?",
            "/b/plugin.json: field 'permission' is not a manifest field and is ignored; did you mean 'permissions'?",
            "/b/plugin.json: field 'variants_' is not a manifest field and is ignored; did you mean 'variants'?",
            "/b/plugin.json: field 'limits.callTimeoutMS' is not a manifest field and is ignored; did you mean 'callTimeoutMs'?",
            "/b/plugin.json: field 'limits.memoryMb' is not a manifest field and is ignored; did you mean 'memoryMB'?",
            "/b/plugin.json: field 'resources.file' is not a manifest field and is ignored; did you mean 'files'?",
        ], "\(m.notes)")
        let deps = try parse(#"{"identifier": "a.b", "version": "1.0.0", "library": "l.so", "dependencies": ["x.y", {"id": "c.d", "verison": ">=1.0.0"}]}"#)
        #expect(deps.notes == ["/b/plugin.json: field 'dependencies[1].verison' is not a manifest field and is ignored; did you mean 'version'?"])
        #expect(try parse(#"{"identifier": "a.b", "version": "1.0.0", "library": "l.so", "limits": {"callTimeoutMs": 5}}"#).notes.isEmpty)
        // Thousands of one typo: ten said, the rest counted.
        let many = (0..<500).map { _ in #"{"library": "v.so", "requirs": {}}"# }.joined(separator: ", ")
        let flood = try parse(#"{"identifier": "a.b", "version": "1.0.0", "variants": [\#(many)]}"#)
        #expect(flood.notes.count == 11 && flood.notes.last == "/b/plugin.json: 490 more fields like these are ignored", "\(flood.notes.last ?? "")")
    }

    @Test func strictJSONWithLineAndColumn() {
        func problem(_ json: String) -> String {
            do { _ = try parse(json); return "" } catch { return error.description }
        }
        #expect(problem("{\n  \"identifier\": \"a.b\",\n}") == "/b/plugin.json: not valid JSON at line 3, column 1: unexpected '}' (a trailing comma before it: JSON allows none)")
        #expect(problem("[1, 2,]").contains("not valid JSON: the file must hold one JSON object"))
        #expect(problem("{\"a\": [1, 2,]}").contains("line 1, column 13: unexpected ']' (a trailing comma"))
        #expect(problem("{\"a\": 1 // note\n}").contains("line 1, column 9: unexpected '/'"))
        #expect(problem("{\"a\": ").contains("ends early"))
        #expect(problem("{} x").contains("line 1, column 4: 'x' after the end of the object"))
        #expect(problem(#"{"identifier": "a.b", "version": 3, "library": "x.so"}"#).contains("field 'version': wrong type"))
    }

    @Test("a number that does not fit its field, bytes that are not UTF-8, a byte order mark: each named, with its field or place")
    func valuesThatDoNotFit() {
        func problem(_ bytes: [UInt8]) -> String {
            do { _ = try Manifest.parse(bytes, bundle: "/b", file: "/b/plugin.json"); return "" } catch { return error.description }
        }
        func problem(_ json: String) -> String { problem(Array(json.utf8)) }
        let base = #""identifier": "a.b", "version": "1.0.0", "library": "x.so""#
        #expect(problem("{\(base), \"limits\": {\"memoryMB\": 256.5}}").contains("field 'limits.memoryMB': 256.5 is not a whole number this field can hold"))
        #expect(problem("{\(base), \"idleStopMs\": 99999999999999999999}").contains("field 'idleStopMs': 99999999999999999999 is not a whole number"))
        #expect(problem("{\(base), \"dependencies\": [{\"id\": 3}]}").contains("field 'dependencies[0].id'"))
        #expect(problem([0xEF, 0xBB, 0xBF] + Array("{\(base)}".utf8)).contains("starts with a byte order mark (BOM)"))
        #expect(problem(Array("{\"identifier\": \"a".utf8) + [0xC3] + Array("b\", \"version\": \"1.0.0\", \"library\": \"x.so\"}".utf8))
                == "/b/plugin.json: not valid JSON at line 1, column 18: bytes that are not UTF-8")
    }

    @Test("a key written twice in one object is refused with its place, at any depth, also when spelled with an escape")
    func duplicateKeys() {
        func problem(_ json: String) -> String {
            do { _ = try parse(json); return "" } catch { return error.description }
        }
        #expect(problem("{\"identifier\": \"a.b\",\n \"version\": \"1.0.0\", \"library\": \"x.so\",\n \"identifier\": \"c.d\"}")
                == "/b/plugin.json: key 'identifier' appears twice in the top-level object: JSON keeps only one of them (line 3, column 2)")
        #expect(problem(#"{"identifier": "a.b", "version": "1.0.0", "library": "x.so", "limits": {"memoryMB": 64, "memoryMB": 128}}"#)
                .contains("key 'memoryMB' appears twice in 'limits'"))
        #expect(problem(#"{"identifier": "a.b", "version": "1.0.0", "library": "x.so", "dependencies": [{"id": "c.d"}, {"id": "e.f", "\u0069d": "g.h"}]}"#)
                .contains("key 'id' appears twice in 'dependencies[1]'"))
        // The same name in two objects is no duplicate.
        #expect(DuplicateKeys.first(in: Array(#"{"a": {"x": 1}, "b": {"x": 2}, "c": [{"x": 1}, {"x": 2}]}"#.utf8)) == nil)
        #expect(DuplicateKeys.first(in: Array(#"{"a": 1, "b": [1, {"c": {"d": 1, "d": 2}}]}"#.utf8))
                == DuplicateKeys.Found(key: "d", object: "b[1].c", offset: 33))
    }

    @Test("a field's fault names where the field is (SPEC §6: file, line and column); a missing one, the object that lacks it")
    func fieldsWithLineAndColumn() {
        func problem(_ json: String) -> String {
            do { _ = try parse(json); return "" } catch { return error.description }
        }
        #expect(problem("{\n  \"identifier\": \"a.b\",\n  \"version\": \"1.x\",\n  \"library\": \"x.so\"\n}")
            == "/b/plugin.json: field 'version': '1.x' is not a semantic version MAJOR.MINOR.PATCH[-pre] (line 3, column 14)")
        #expect(problem("{\n  \"identifier\": \"a.b\",\n  \"library\": \"x.so\"\n}")
            == "/b/plugin.json: field 'version': missing (required) (in the object at line 1, column 1)")
        #expect(problem(#"{"identifier": "a.b", "version": 3, "library": "x.so"}"#).hasSuffix("(line 1, column 34)"))
        #expect(problem("{\"identifier\":\"a.b\",\"version\":\"1.0.0\",\"library\":\"x.so\",\n \"dependencies\":[\"x.y\", {\"version\":\">=1.0.0\"}]}")
            .hasSuffix("field 'dependencies[1].id': missing (in the object at line 2, column 25)"))
        #expect(problem(#"{"identifier":"a.b","version":"1.0.0","library":"x.so","limits":{"memoryMB":"lots"}}"#)
            .contains("field 'limits.memoryMB': wrong type") == true)
        #expect(problem(#"{"identifier":"a.b","version":"1.0.0","library":"x.so","limits":{"memoryMB":"lots"}}"#).hasSuffix("(line 1, column 77)"))
    }

    @Test func full() throws {
        let m = try parse("""
            {"identifier":"a.b","version":"1.2.3-rc.1","dependencies":["x.y",{"id":"z.w","version":">=1.0.0"}],
             "library":"lib/a.so","permissions":["network","filesystem.read:/srv/data"],"restart":"always",
             "limits":{"memoryMB":64,"callTimeoutMs":100,"cpuPercent":150,"startupTimeoutMs":2000},"unknownField":{"ignored":true}}
            """)
        #expect(m.limits.cpuPercent == 150 && m.limits.startupTimeoutMs == 2000)
        #expect(m.identifier == "a.b")
        #expect(m.dependencies == [.init(identifier: "x.y", range: nil), .init(identifier: "z.w", range: ">=1.0.0")])
        #expect(m.restart == .always)
        #expect(m.limits.memoryMB == 64)
        #expect(m.permissions.count == 2)
        #expect(m.idempotent.isEmpty && m.limits.retries == 1)
    }

    /// `idempotent` (names and trailing-`*` prefixes) and `limits.retries`, from 0 to 10.
    @Test func idempotentMethodsAndRetries() throws {
        let m = try parse(#"{"identifier":"a.b","version":"1.0.0","library":"a.so","idempotent":["get","list.*","*"],"limits":{"retries":0}}"#)
        #expect(m.idempotent == ["get", "list.*", "*"])
        #expect(m.limits.retries == 0)
        let most = try parse(#"{"identifier":"a.b","version":"1.0.0","library":"a.so","limits":{"retries":10}}"#)
        #expect(most.limits.retries == 10 && most.idempotent.isEmpty)
    }

    @Test(arguments: [
        (#"{"version":"1.0.0","library":"a.so"}"#, "identifier", "missing"),
        (#"{"identifier":"a b","version":"1.0.0","library":"a.so"}"#, "identifier", "reverse-DNS"),
        (#"{"identifier":"a.b","library":"a.so"}"#, "version", "missing"),
        (#"{"identifier":"a.b","version":"1.0.0"}"#, "library", "missing"),
        (#"{"identifier":"a.b","version":"1.0.0","library":"../a.so"}"#, "library", "inside the bundle"),
        (#"{"identifier":"a.b","version":"1.0.0","library":"/lib/a.so"}"#, "library", "inside the bundle"),
        (#"{"identifier":"a.b","version":"1.0.0","library":"a.so","restart":"sometimes"}"#, "restart", "on-failure"),
        (#"{"identifier":"a.b","version":"1.0.0","library":"a.so","dependencies":[{"version":"1.0.0"}]}"#, "dependencies[0].id", "missing"),
        (#"{"identifier":"a.b","version":"1.0.0","library":"a.so","dependencies":[{"id":"c.d","version":"soon"}]}"#, "dependencies[0].version", "version range"),
        (#"{"identifier":"a.b","version":"1.0.0","library":"a.so","dependencies":["a.b"]}"#, "dependencies[0]", "itself"),
        (#"{"identifier":"a.b","version":"1.0.0","library":"a.so","permissions":["filesystem.read:relative"]}"#, "permissions[0]", "unknown permission"),
        (#"{"identifier":"a.b","version":"1.0.0","library":"a.so","limits":{"memoryMB":0}}"#, "limits.memoryMB", "positive"),
        (#"{"identifier":"a.b","version":"1.0.0","library":"a.so","limits":{"cpuPercent":0}}"#, "limits.cpuPercent", "positive"),
        (#"{"identifier":"a.b","version":"1.0.0","library":"a.so","limits":{"cpuPercent":100001}}"#, "limits.cpuPercent", "100000"),
        (#"{"identifier":"a.b","version":"1.0.0","library":"a.so","limits":{"startupTimeoutMs":-5}}"#, "limits.startupTimeoutMs", "positive"),
        (#"{"identifier":"a.b","version":"1.0.0","library":"a.so","limits":{"callTimeoutMs":9223372036854775807}}"#, "limits.callTimeoutMs", "over a day"),
        (#"{"identifier":"a.b","version":"1.0.0","library":"a.so","limits":{"memoryMB":9007199254740992}}"#, "limits.memoryMB", "a PiB"),
        (#"{"identifier":"a.b","version":"1.0.0","library":"a.so","limits":{"openFiles":9007199254740992}}"#, "limits.openFiles", "over 1073741824"),
        // Limits a worker cannot start under, and a warning that could only come after the kill.
        (#"{"identifier":"a.b","version":"1.0.0","library":"a.so","limits":{"memoryMB":16}}"#, "limits.memoryMB", "16 is under 32: the worker itself takes about 20 MiB"),
        (#"{"identifier":"a.b","version":"1.0.0","library":"a.so","limits":{"openFiles":3}}"#, "limits.openFiles", "3 is under 16"),
        (#"{"identifier":"a.b","version":"1.0.0","library":"a.so","limits":{"memoryMB":64,"softMemoryMB":128}}"#, "limits.softMemoryMB", "128 is over the hard limit (memoryMB 64)"),
        (#"{"identifier":"a.b","version":"1.0.0","library":"a.so","limits":{"softMemoryMB":2048}}"#, "limits.softMemoryMB", "2048 is over the hard limit (memoryMB 1024)"),
        (#"{"identifier":"a.b","version":"1.0.0","library":5}"#, "library", "wrong type"),
        (#"{"identifier":"a.b","version":"1.0.0","library":"a.so","idempotent":["get",""]}"#, "idempotent[1]", "an empty method name"),
        (#"{"identifier":"a.b","version":"1.0.0","library":"a.so","idempotent":["*get"]}"#, "idempotent[0]", "'*' may only end a name"),
        (#"{"identifier":"a.b","version":"1.0.0","library":"a.so","idempotent":["g*e*"]}"#, "idempotent[0]", "'*' may only end a name"),
        (#"{"identifier":"a.b","version":"1.0.0","library":"a.so","idempotent":"get"}"#, "idempotent", "wrong type"),
        (#"{"identifier":"a.b","version":"1.0.0","library":"a.so","limits":{"retries":11}}"#, "limits.retries", "between 0 and 10, got 11"),
        (#"{"identifier":"a.b","version":"1.0.0","library":"a.so","limits":{"retries":-1}}"#, "limits.retries", "between 0 and 10, got -1"),
        // Found by FuzzManifest: a scheme with nothing after it was accepted (and became "https:/").
        (#"{"identifier":"a.b","version":"1.0.0","library":"a.so","resources":{"baseURL":"https://"}}"#, "resources.baseURL", "no host"),
        (#"{"identifier":"a.b","version":"1.0.0","library":"a.so","resources":{"baseURL":"http:///x"}}"#, "resources.baseURL", "no host"),
        (#"{"identifier":"a.b","version":"1.0.0","library":"a.so","resources":{"baseURL":"file:///"}}"#, "resources.baseURL", "no path"),
        // A resource's name while it downloads, a file that is another's folder, one listed twice.
        (#"{"identifier":"a.b","version":"1.0.0","library":"a.so","resources":{"baseURL":"https://x","files":["x.download","x"]}}"#, "resources.files[0]", "ends in .download"),
        (#"{"identifier":"a.b","version":"1.0.0","library":"a.so","resources":{"baseURL":"https://x","files":["a","a/b"]}}"#, "resources.files[1]", "'a/b' and 'a': one would be the other's folder"),
        (#"{"identifier":"a.b","version":"1.0.0","library":"a.so","resources":{"baseURL":"https://x","files":["a/b","a"]}}"#, "resources.files[1]", "'a' and 'a/b'"),
        (#"{"identifier":"a.b","version":"1.0.0","library":"a.so","resources":{"baseURL":"https://x","files":["c","c"]}}"#, "resources.files[1]", "'c' is listed twice"),
    ])
    func errors(_ json: String, _ field: String, _ reason: String) {
        do {
            _ = try parse(json)
            Issue.record("accepted \(json)")
        } catch {
            #expect(error.file == "/b/plugin.json")
            #expect(error.field == field, "\(error)")
            #expect(error.reason.contains(reason), "\(error)")
        }
    }
}

@Suite struct CatalogTests {
    func manifest(_ id: String, _ deps: [String] = [], version: String = "1.0.0") -> Manifest {
        Manifest(identifier: id, version: SemanticVersion(version)!, dependencies: deps.map { .init(identifier: $0, range: nil) },
                 library: "x.so", variants: [], permissions: [], restart: .onFailure, limits: .init(), resources: nil, bundle: "/p/\(id)",
                 file: "/p/\(id)/plugin.json")
    }

    @Test func orderAndCycles() {
        let c = PluginCatalog(manifests: [
            manifest("d", ["b", "c"]), manifest("b", ["a"]), manifest("c", ["a"]), manifest("a"),
            manifest("x", ["y"]), manifest("y", ["z"]), manifest("z", ["x"]), manifest("w", ["x"]),
        ])
        let order = c.order
        #expect(order.firstIndex(of: "a")! < order.firstIndex(of: "b")!)
        #expect(order.firstIndex(of: "b")! < order.firstIndex(of: "d")!)
        #expect(order.firstIndex(of: "c")! < order.firstIndex(of: "d")!)
        #expect(c.unstartable["x"]?.contains("dependency cycle x → y → z → x") == true)
        #expect(c.unstartable["y"]?.contains("x → y → z → x") == true)
        #expect(c.unstartable["w"]?.contains("dependency x cannot start") == true)
        #expect(Set(c.manifests.keys) == ["a", "b", "c", "d"])
    }

    @Test func missingDependenciesAndUnmetRanges() {
        var ranged = manifest("r")
        ranged.dependencies = [.init(identifier: "a", range: ">=2.0.0")]
        let c = PluginCatalog(manifests: [manifest("a"), manifest("m", ["gone"]), ranged, manifest("after", ["m"]), manifest("ok", ["a"])])
        #expect(c.unstartable["m"] == "/p/m/plugin.json: dependency gone is not installed")
        #expect(c.unstartable["r"] == "/p/r/plugin.json: dependency a >=2.0.0 is not met by the installed 1.0.0")
        #expect(c.unstartable["after"] == "/p/after/plugin.json: dependency m cannot start")
        #expect(Set(c.manifests.keys) == ["a", "ok"])
        // Every plugin, startable or not, is still in the order, dependencies first.
        #expect(Set(c.order) == ["a", "m", "r", "after", "ok"])
        #expect(c.order.firstIndex(of: "m")! < c.order.firstIndex(of: "after")!)
        #expect(c.order.firstIndex(of: "a")! < c.order.firstIndex(of: "ok")!)
    }

    @Test func duplicates() {
        var second = manifest("a")
        second.file = "/q/a/plugin.json"
        let c = PluginCatalog(manifests: [manifest("a"), second])
        #expect(c.problems.count == 1)
        #expect(c.problems[0].contains("/q/a/plugin.json: field 'identifier': duplicate identifier a, already used by /p/a/plugin.json"))
    }
}

@Suite struct ScaffoldTests {
    @Test func moduleNames() {
        #expect(Scaffold.moduleName("com.example.hello-world") == "HelloWorld")
        #expect(Scaffold.moduleName("com.example.hello") == "Hello")
        #expect(Scaffold.moduleName("com.example.1st") == "Plugin1st")
        #expect(Scaffold.moduleName("org.swift") == "SwiftPlugin")
        #expect(Scaffold.moduleName("org.plugin-sdk") == "PluginSdk")
        #expect(Scaffold.moduleName("x.PluginSDK") == "PluginSDKPlugin")
    }

    @Test func plans() {
        let swift = Scaffold.plan(identifier: "com.example.hello", language: .swift, sdk: "/sdk")
        #expect(swift.library == "libHello.so" && swift.build == "swift build -c release && cp --remove-destination .build/release/libHello.so .")
        #expect(swift.files.map(\.path) == ["plugin.json", "Package.swift", "Sources/Hello/Hello.swift", "README.md", ".gitignore"])
        #expect(swift.files.first { $0.path == "Package.swift" }?.text.contains(#".package(path: "/sdk")"#) == true)
        let readme = swift.files.first { $0.path == "README.md" }!.text
        #expect(readme.split(separator: "\n").count == 5 && readme.contains("supervisor reload"))
        let c = Scaffold.plan(identifier: "com.example.hello", language: .c, sdk: "/sdk")
        #expect(c.library == "libhello.so" && c.build == "make")
        #expect(c.files.first { $0.path == "Makefile" }?.text.contains("\tcc -shared -fPIC") == true)
        // Each manifest is one the supervisor accepts.
        for plan in [swift, c] {
            let json = plan.files.first { $0.path == "plugin.json" }!.text
            #expect((try? Manifest.parse(Array(json.utf8), bundle: "/b", file: "/b/plugin.json")) != nil)
        }
    }
}

/// The plugin catalog document as the installer reads it (install.md, "The catalog").
@Suite struct CatalogDocumentTests {
    func parse(_ json: String) throws -> CatalogDocument { try CatalogCache.parseDocument(Array(json.utf8), url: "https://x/catalog.json") }

    func refusal(_ json: String) -> String {
        do { _ = try parse(json); return "accepted" } catch { return "\(error)" }
    }

    @Test func aFieldOfTheWrongTypeIsNamed() {
        let entry = #"{"identifier":"a.b","version":"1.0.0","url":"a.tgz"}"#
        #expect(refusal(#"{"version":"10","plugins":[\#(entry)]}"#).contains("the catalog at https://x/catalog.json: 'version' is not an integer"))
        #expect(refusal(#"{"version":10.5,"plugins":[\#(entry)]}"#).contains("a number that is not a whole number where an integer belongs (as `version`)"))
        #expect(refusal(#"{"version":1,"plugins":[{"identifier":"a.b","version":1,"url":"a.tgz"}]}"#).contains("'plugins[0].version' is not a string"))
        #expect(refusal(#"{"version":1,"plugins":[{"identifier":"a.b","url":"a.tgz"}]}"#).contains("'plugins[0].version' is missing"))
        #expect(refusal(#"[1, 2]"#).contains("is not a list of {identifier, version, url, sha256, signature}"))
        // Named as JSON names them, not as Swift's types.
        #expect(refusal(#"{"version":1,"plugins":{}}"#).contains("'plugins' is not a list"), "\(refusal(#"{"version":1,"plugins":{}}"#))")
        #expect(refusal(#"{"version":1,"plugins":[{"identifier":"a.b","version":"1.0.0","url":"a.tgz","onDemand":"yes"}]}"#).contains("'plugins[0].onDemand' is not true or false"))
        #expect(refusal(#"[\#(entry)]"#) == "accepted")
        // A digest that is not one: every download would look corrupt or tampered with.
        #expect(refusal(#"[{"identifier":"a.b","version":"1.0.0","url":"a.tgz","sha256":"zz"}]"#).contains("catalog entry 0 (a.b): sha256 'zz' is not 64 hex digits"))
        #expect(refusal(#"[{"identifier":"a.b","version":"1.0.0","url":"a.tgz","sha256":"\#(String(repeating: "Ab", count: 32))"}]"#) == "accepted")
        #expect(refusal(#"{"version":1,"plugins":[{"identifier":"a.b","version":"1.0.0","url":"a.tgz","url":"b.tgz"}]}"#)
                .contains("the catalog at https://x/catalog.json: key 'url' appears twice in 'plugins[0]'"))
    }

    @Test func theNewestOfEachPluginIsOffered() throws {
        let doc = try parse(#"""
            {"version":1,"plugins":[{"identifier":"a.b","version":"3.0.0","url":"a3.tgz"},{"identifier":"c.d","version":"1.0.0","url":"c.tgz"},
                                    {"identifier":"a.b","version":"2.0.0","url":"a2.tgz"},{"identifier":"a.b","version":"3.1.0-beta.1","url":"a31.tgz"}]}
            """#)
        let newest = CatalogCache.newest(doc.entries)
        #expect(newest.map(\.identifier) == ["a.b", "c.d"])
        #expect(newest.map(\.version) == ["3.1.0-beta.1", "1.0.0"])
        #expect(newest.first?.url == "https://x/a31.tgz")
    }
}

@Suite struct BundlePermissionsTests {
    @Test func aLinkIsJudgedByWhatItLeadsTo() throws {
        let bundle = FileManager.default.temporaryDirectory.appendingPathComponent("perm-\(UUID().uuidString.prefix(8))").path
        try FileManager.default.createDirectory(atPath: bundle, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: bundle) }
        chmod(bundle, 0o755)
        try Data("{}".utf8).write(to: URL(fileURLWithPath: bundle + "/manifest.real"))
        chmod(bundle + "/manifest.real", 0o644)
        #expect(symlink("manifest.real", bundle + "/plugin.json") == 0)
        // The link's own mode (0777) is not the file's.
        #expect(BundlePermissions.problem(bundle: bundle, files: ["plugin.json"]) == nil)
        chmod(bundle + "/manifest.real", 0o666)
        let problem = BundlePermissions.problem(bundle: bundle, files: ["plugin.json"]) ?? ""
        #expect(problem.contains("plugin.json (a link to \(bundle)/manifest.real) is writable by every user (mode 0666)"), "\(problem)")
    }

    @Test("a file or folder of another user is refused whatever its mode (its owner may chmod it), and so is a writable folder on the way to a library")
    func ownersAndFoldersOnTheWay() throws {
        let bundle = FileManager.default.temporaryDirectory.appendingPathComponent("perm-\(UUID().uuidString.prefix(8))").path
        try FileManager.default.createDirectory(atPath: bundle + "/sub", withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: bundle) }
        chmod(bundle, 0o755)
        chmod(bundle + "/sub", 0o755)
        for file in ["plugin.json", "sub/lib.so"] {
            try Data("x".utf8).write(to: URL(fileURLWithPath: bundle + "/" + file))
            chmod(bundle + "/" + file, 0o444)
        }
        let uid = geteuid(), gid = getegid()
        #expect(BundlePermissions.problem(bundle: bundle, files: ["plugin.json", "sub/lib.so"], uid: uid, gid: gid) == nil)
        // Another owner, no write bit anywhere: still refused (giving a file away takes root, as
        // the suite runs in CI).
        if uid == 0 {
            #expect(chown(bundle + "/sub/lib.so", 65534, 65534) == 0)
            let problem = BundlePermissions.problem(bundle: bundle, files: ["plugin.json", "sub/lib.so"], uid: uid, gid: gid) ?? ""
            #expect(problem.contains("\(bundle)/sub/lib.so belongs to uid 65534, who can change it"), "\(problem)")
            #expect(chown(bundle + "/sub/lib.so", 0, 0) == 0)
        }
        chmod(bundle + "/sub", 0o777)
        let problem = BundlePermissions.problem(bundle: bundle, files: ["plugin.json", "sub/lib.so"], uid: uid, gid: gid) ?? ""
        #expect(problem.contains("\(bundle)/sub is writable by every user (mode 0777)"), "\(problem)")
    }
}

/// The plugin folders read again while plugins run (`PluginCatalog(directories:known:)`): what the
/// folders say never takes a plugin away by accident.
@Suite struct PluginFoldersTests {
    let root = FileManager.default.temporaryDirectory.appendingPathComponent("folders-\(UUID().uuidString.prefix(8))").path

    func bundle(_ folder: String, _ name: String, _ json: String) throws -> String {
        let path = root + "/" + folder + "/" + name
        try FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: true)
        try json.write(toFile: path + "/plugin.json", atomically: true, encoding: .utf8)
        return FileSystem.realPath(path) ?? path
    }

    @Test("a bundle of the same identifier dropped in beside a running one is the one ignored, also when the running one's plugin.json breaks")
    func theKnownBundleWins() throws {
        defer { try? FileManager.default.removeItem(atPath: root) }
        let running = try bundle("p", "zzz", #"{"identifier": "com.x.svc", "version": "1.0.0", "library": "lib.so"}"#)
        let known = try Manifest.load(bundle: running)
        _ = try bundle("p", "aaa", #"{"identifier": "com.x.svc", "version": "0.0.1", "library": "lib.so"}"#)
        let catalog = PluginCatalog(directories: [root + "/p"], known: [known])
        #expect(catalog.all["com.x.svc"]?.bundle == running)
        #expect(catalog.problems.contains { $0.contains("/aaa/plugin.json: field 'identifier': duplicate identifier com.x.svc") })
        // Its plugin.json cut short: it is still that plugin, refused, and the newcomer still ignored.
        try #"{"identifier": "com.x.s"#.write(toFile: running + "/plugin.json", atomically: true, encoding: .utf8)
        let broken = PluginCatalog(directories: [root + "/p"], known: [known])
        #expect(broken.all["com.x.svc"]?.bundle == running)
        #expect(broken.unstartable["com.x.svc"]?.contains("not valid JSON") == true)
        #expect(broken.all["zzz"] == nil)
    }

    @Test("a library that leads out of its bundle through a link, or is not a regular file (a FIFO, a folder), is refused at load, naming the field")
    func librariesThatCannotBe() throws {
        defer { try? FileManager.default.removeItem(atPath: root) }
        let out = try bundle("r", "out", #"{"identifier": "r.out", "version": "1.0.0", "library": "lib.so"}"#)
        #expect(symlink("/bin/true", out + "/lib.so") == 0)
        let fifo = try bundle("r", "fifo", #"{"identifier": "r.fifo", "version": "1.0.0", "variants": [{"library": "v.so"}]}"#)
        #expect(mkfifo(fifo + "/v.so", 0o600) == 0)
        func problem(_ path: String) -> String {
            do { _ = try Manifest.load(bundle: path); return "" } catch { return error.description }
        }
        #expect(problem(out).contains("field 'library': 'lib.so' leads out of the bundle (to /usr/bin/true)") || problem(out).contains("leads out of the bundle (to /bin/true)"), "\(problem(out))")
        #expect(problem(fifo).contains("field 'variants[0].library': 'v.so' is a FIFO, not a regular file"), "\(problem(fifo))")
    }

    @Test("a bundle's own folder given as the plugin folder: said, naming the folder to give instead")
    func aBundleGivenAsThePluginFolder() throws {
        defer { try? FileManager.default.removeItem(atPath: root) }
        let path = try bundle("s", "hello", #"{"identifier": "com.x.hello", "version": "1.0.0", "library": "lib.so"}"#)
        let catalog = PluginCatalog(directories: [path])
        #expect(catalog.all.isEmpty)
        #expect(catalog.problems == ["\(path): holds a plugin.json of its own, and is read as a folder of bundles (one folder each), not as one: give the folder that holds it (\((path as NSString).deletingLastPathComponent)) as the plugin folder"], "\(catalog.problems)")
        #expect(PluginCatalog(directories: [(path as NSString).deletingLastPathComponent]).problems.isEmpty)
        // With a trailing slash, the folder to give is still the one above.
        for given in [path + "/", path + "/.", path + "/./"] {
            #expect(PluginCatalog(directories: [given]).problems.first?.contains("(\((path as NSString).deletingLastPathComponent)) as the plugin folder") == true, "\(given)")
        }
    }

    @Test("the known plugins of a folder that cannot be read are kept, the folder's fault reported")
    func anUnreadableFolderKeepsItsPlugins() throws {
        defer { try? FileManager.default.removeItem(atPath: root) }
        let path = try bundle("q", "a", #"{"identifier": "com.x.a", "version": "1.0.0", "library": "lib.so"}"#)
        let known = try Manifest.load(bundle: path)
        try FileManager.default.moveItem(atPath: root + "/q", toPath: root + "/q-elsewhere")
        let catalog = PluginCatalog(directories: [root + "/q"], known: [known])
        #expect(catalog.all["com.x.a"]?.bundle == path)
        #expect(catalog.unstartable["com.x.a"] == nil)
        #expect(catalog.problems == ["\(root)/q: plugin folder does not exist; its plugins keep running as they are (com.x.a)"])
    }
}
