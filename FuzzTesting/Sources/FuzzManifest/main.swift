// Fuzzes Bundles.Manifest.parse: a bundle's plugin.json, which an install archive brings from
// elsewhere. Parsing may refuse the bytes (naming the file); what it accepts must hold every rule the
// supervisor relies on later, and its versions and ranges must be usable without trapping.

import Bundles
import PluginProtocol

@_cdecl("LLVMFuzzerTestOneInput")
public func fuzz(_ start: UnsafeRawPointer, _ count: Int) -> CInt {
    let bytes = Array(UnsafeRawBufferPointer(start: start, count: count))
    let manifest: Manifest
    do {
        manifest = try Manifest.parse(bytes, bundle: "/b", file: "/b/plugin.json")
    } catch {
        precondition(error.file == "/b/plugin.json", "error names \(error.file)")
        precondition(error.description.hasPrefix("/b/plugin.json: "), "error text \(error.description)")
        return 0
    }
    check(manifest)
    return 0
}

func check(_ m: Manifest) {
    precondition(m.bundle == "/b" && m.file == "/b/plugin.json")
    precondition(PluginIdentifier.isValid(m.identifier), "accepted identifier '\(m.identifier)'")

    // The version prints as text that parses back to the same version.
    let text = m.version.description
    guard let again = SemanticVersion(text) else { preconditionFailure("version prints as '\(text)', which does not parse") }
    precondition(again == m.version && again.build == m.version.build && !(again < m.version) && !(m.version < again),
                 "version '\(text)' parses back as '\(again)'")

    precondition((m.library == nil) != m.variants.isEmpty, "library and variants both or neither")
    for lib in [m.library].compactMap({ $0 }) + m.variants.map(\.library) {
        precondition(!lib.isEmpty && !lib.hasPrefix("/") && !lib.split(separator: "/").contains(".."), "library '\(lib)' leaves the bundle")
    }
    for p in m.permissions { precondition(Permission(p.description) == p, "permission \(p) does not read back") }
    for value in [m.limits.memoryMB, m.limits.softMemoryMB, m.limits.openFiles, m.limits.callTimeoutMs] {
        if let value { precondition(value > 0, "accepted limit \(value)") }
    }
    for d in m.dependencies {
        precondition(PluginIdentifier.isValid(d.identifier) && d.identifier != m.identifier, "accepted dependency '\(d.identifier)'")
        if let text = d.range {
            guard let range = VersionRange(text) else { preconditionFailure("accepted range '\(text)' does not parse") }
            _ = range.contains(m.version)
            _ = range.contains(SemanticVersion(0, 0, 0))
            _ = range.contains(SemanticVersion(UInt64.max, UInt64.max, UInt64.max))
        }
    }
    if let r = m.resources {
        precondition(r.baseURL.hasPrefix("http://") || r.baseURL.hasPrefix("https://") || r.baseURL.hasPrefix("file://"))
        for f in r.files { precondition(!f.isEmpty && !f.hasPrefix(".") && !f.hasPrefix("/") && !f.split(separator: "/").contains("..")) }
    }
    // Variants' requirements (arch, kernel range, sandbox features) against this host, as a load does.
    _ = try? VariantSelector.choose(m, sandbox: false)
}
