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
    /// The archive's size in bytes (SPEC §9): a download is cut off past it.
    public var length: Int?
}

/// A catalog document: its entries and what protects it against rollback and freeze (SPEC §9).
public struct CatalogDocument: Sendable {
    public var entries: [CatalogEntry]
    /// Must not go down from the last one accepted.
    public var version: Int?
    /// RFC 3339; past it the catalog is refused (`catalogExpired`).
    public var expires: String?
    public var expiresAt: Date?

    /// Why the catalog has expired at `now`, or nil.
    public func expiry(now: Date = Date()) -> String? {
        guard let expiresAt, let expires, expiresAt <= now else { return nil }
        return "the catalog expired at \(expires); the server may be serving a frozen copy"
    }
}

/// The catalog's cached copy in `<home>/cache/catalog.json` (the installer keeps it current).
public enum CatalogCache {
    public static func path(home: String) -> String { home + "/cache/catalog.json" }

    /// The cached entries, or none (none once the cached catalog has expired: a frozen copy is not used).
    public static func entries(home: String, url: String) -> [CatalogEntry] {
        guard let bytes = try? FileSystem.readFile(path(home: home), limit: 8 << 20),
              let document = try? parseDocument(bytes, url: url), document.expiry() == nil else { return [] }
        return document.entries
    }

    /// `{"plugins": [entries]}` or a bare array; relative entry URLs resolve against the catalog's.
    public static func parse(_ bytes: [UInt8], url: String) throws -> [CatalogEntry] {
        try parseDocument(bytes, url: url).entries
    }

    /// `{"version": n, "expires": "<RFC 3339>", "plugins": [entries]}` (or, unsigned catalogs of old, a
    /// bare array of entries).
    public static func parseDocument(_ bytes: [UInt8], url: String) throws -> CatalogDocument {
        struct Document: Decodable { var plugins: [CatalogEntry]; var version: Int?; var expires: String? }
        let data = Data(bytes)
        var entries: [CatalogEntry]
        var version: Int?
        var expires: String?
        if let doc = try? JSONDecoder().decode(Document.self, from: data) {
            entries = doc.plugins
            version = doc.version
            expires = doc.expires
        } else {
            do { entries = try JSONDecoder().decode([CatalogEntry].self, from: data) } catch {
                throw InstallError(.catalogInvalid, "the catalog at \(url) is not a list of {identifier, version, url, sha256, signature}: \(error)")
            }
        }
        for (i, e) in entries.enumerated() {
            guard SemanticVersion(e.version) != nil else {
                throw InstallError(.catalogInvalid, "catalog entry \(i) (\(e.identifier)): '\(e.version)' is not a semantic version")
            }
            if let length = e.length, length <= 0 {
                throw InstallError(.catalogInvalid, "catalog entry \(i) (\(e.identifier)): length \(length) is not a positive number of bytes")
            }
            if !e.url.contains("://") {
                let base = url[..<(url.lastIndex(of: "/") ?? url.endIndex)]
                entries[i].url = base + "/" + e.url
            }
        }
        var expiresAt: Date?
        if let expires {
            guard let date = RFC3339.date(expires) else {
                throw InstallError(.catalogInvalid, "the catalog at \(url): expires '\(expires)' is not an RFC 3339 time (like 2027-01-31T00:00:00Z)")
            }
            expiresAt = date
        }
        return CatalogDocument(entries: entries, version: version, expires: expires, expiresAt: expiresAt)
    }
}

/// RFC 3339 times (`2027-01-31T00:00:00Z`, with or without fractional seconds or an offset).
public enum RFC3339 {
    public static func date(_ text: String) -> Date? {
        if let d = try? Date(text, strategy: .iso8601) { return d }
        return try? Date(text, strategy: Date.ISO8601FormatStyle(includingFractionalSeconds: true))
    }
}
