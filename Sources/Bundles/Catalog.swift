#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif
import LinuxSupport

/// One plugin the catalog offers (SPEC §9).
public struct CatalogEntry: Codable, Sendable, Equatable {
    public var identifier: String
    public var version: String
    public var url: String
    public var sha256: String?
    public var signature: String?
    public var onDemand: Bool?
}

/// The catalog's cached copy in `<home>/cache/catalog.json` (the installer keeps it current).
public enum CatalogCache {
    public static func path(home: String) -> String { home + "/cache/catalog.json" }

    /// The cached entries, or none.
    public static func entries(home: String, url: String) -> [CatalogEntry] {
        guard let bytes = try? FileSystem.readFile(path(home: home), limit: 8 << 20) else { return [] }
        return (try? parse(bytes, url: url)) ?? []
    }

    /// `{"plugins": [entries]}` or a bare array; relative entry URLs resolve against the catalog's.
    public static func parse(_ bytes: [UInt8], url: String) throws -> [CatalogEntry] {
        struct Document: Decodable { var plugins: [CatalogEntry] }
        let data = Data(bytes)
        var entries: [CatalogEntry]
        if let doc = try? JSONDecoder().decode(Document.self, from: data) {
            entries = doc.plugins
        } else {
            do { entries = try JSONDecoder().decode([CatalogEntry].self, from: data) } catch {
                throw InstallError(.catalogInvalid, "the catalog at \(url) is not a list of {identifier, version, url, sha256, signature}: \(error)")
            }
        }
        for (i, e) in entries.enumerated() {
            guard SemanticVersion(e.version) != nil else {
                throw InstallError(.catalogInvalid, "catalog entry \(i) (\(e.identifier)): '\(e.version)' is not a semantic version")
            }
            if !e.url.contains("://") {
                let base = url[..<(url.lastIndex(of: "/") ?? url.endIndex)]
                entries[i].url = base + "/" + e.url
            }
        }
        return entries
    }
}
