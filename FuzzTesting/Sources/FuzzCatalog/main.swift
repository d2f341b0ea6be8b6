// Fuzzes Bundles.CatalogCache.parse: the catalog a server sends. Parsing may refuse the bytes; what
// it accepts has semantic versions and absolute URLs, and encodes and parses back to itself.

#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif
import Bundles

let catalogURL = "https://example.invalid/catalog.json"

@_cdecl("LLVMFuzzerTestOneInput")
public func fuzz(_ start: UnsafeRawPointer, _ count: Int) -> CInt {
    let bytes = Array(UnsafeRawBufferPointer(start: start, count: count))
    guard let entries = try? CatalogCache.parse(bytes, url: catalogURL) else { return 0 }
    for e in entries {
        guard let v = SemanticVersion(e.version) else { preconditionFailure("accepted version '\(e.version)'") }
        precondition(SemanticVersion(v.description) == v, "version '\(e.version)' prints as '\(v)'")
        precondition(e.url.contains("://"), "entry URL '\(e.url)' is not absolute")
    }
    // What was accepted, written out again, is accepted as the same entries, in both shapes.
    let encoder = JSONEncoder()
    let array: [UInt8]
    do { array = Array(try encoder.encode(entries)) } catch { preconditionFailure("entries do not encode: \(error)") }
    let document = Array("{\"plugins\":".utf8) + array + Array("}".utf8)
    for shape in [array, document] {
        let again: [CatalogEntry]
        do { again = try CatalogCache.parse(shape, url: catalogURL) } catch { preconditionFailure("re-encoded catalog refused: \(error)") }
        precondition(again == entries, "re-encoded catalog parses as \(again), not \(entries)")
    }
    return 0
}
