#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif
import BundleModel
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
        do {
            let doc = try JSONDecoder().decode(Document.self, from: data)
            entries = doc.plugins
            version = doc.version
            expires = doc.expires
        } catch let asDocument {
            if let list = try? JSONDecoder().decode([CatalogEntry].self, from: data) {
                entries = list
            } else if bytes.first(where: { ![0x20, 0x09, 0x0A, 0x0D].contains($0) }) == UInt8(ascii: "{") {
                // A document whose fields are wrong: the field is named, not the bare list it is not.
                throw InstallError(.catalogInvalid, "the catalog at \(url): \(Self.describe(asDocument))")
            } else {
                throw InstallError(.catalogInvalid, "the catalog at \(url) is not a list of {identifier, version, url, sha256, signature}")
            }
        }
        if let duplicate = DuplicateKeys.first(in: bytes) {
            throw InstallError(.catalogInvalid, "the catalog at \(url): \(DuplicateKeys.describe(duplicate))")
        }
        for (i, e) in entries.enumerated() {
            guard SemanticVersion(e.version) != nil else {
                throw InstallError(.catalogInvalid, "catalog entry \(i) (\(e.identifier)): '\(e.version)' is not a semantic version")
            }
            if let digest = e.sha256, digest.utf8.count != 64 || !digest.utf8.allSatisfy({ ($0 >= 0x30 && $0 <= 0x39) || ($0 | 0x20 >= 0x61 && $0 | 0x20 <= 0x66) }) {
                // Else every download would fail as if corrupt or tampered with.
                throw InstallError(.catalogInvalid, "catalog entry \(i) (\(e.identifier)): sha256 '\(digest.prefix(80))' is not 64 hex digits")
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

extension CatalogCache {
    /// One entry per plugin, the newest version of those the catalog lists (a catalog may list
    /// several), in the order the plugins first appear.
    public static func newest(_ entries: [CatalogEntry]) -> [CatalogEntry] {
        var best: [String: CatalogEntry] = [:]
        var order: [String] = []
        for entry in entries {
            guard let current = best[entry.identifier] else {
                best[entry.identifier] = entry
                order.append(entry.identifier)
                continue
            }
            if let v = SemanticVersion(entry.version), let w = SemanticVersion(current.version), v > w { best[entry.identifier] = entry }
        }
        return order.compactMap { best[$0] }
    }

    /// What a JSON value of Swift type `type` is, as a catalog's author says it.
    static func kind(_ type: Any.Type) -> String {
        switch type {
        case is Int.Type, is Int64.Type, is UInt64.Type: return "an integer"
        case is String.Type: return "a string"
        case is Bool.Type: return "true or false"
        case is Double.Type: return "a number"
        default:
            let name = "\(type)"
            return name.hasPrefix("Array") ? "a list" : name.hasPrefix("Dictionary") ? "an object" : "a \(name)"
        }
    }

    /// A decoding error as a reader of the catalog wants it: the field and what is wrong with it.
    static func describe(_ error: any Error) -> String {
        guard let error = error as? DecodingError else { return "\(error)" }
        let field = Manifest.fieldPath
        switch error {
        case .typeMismatch(let type, let c):
            return "'\(field(c.codingPath))' is not \(Self.kind(type))"
        case .dataCorrupted(let c) where c.codingPath.isEmpty:
            // What the decoder says of a fraction or an exponent where an integer belongs, too.
            return "not valid JSON, or a number that is not a whole number where an integer belongs (as `version`)"
        case .valueNotFound(_, let c), .dataCorrupted(let c):
            return "'\(field(c.codingPath))': \(c.debugDescription)"
        case .keyNotFound(let key, let c):
            return "'\(field(c.codingPath + [key]))' is missing"
        @unknown default:
            return "\(error)"
        }
    }
}

/// RFC 3339 times (`2027-01-31T00:00:00Z`, with or without fractional seconds or an offset).
public enum RFC3339 {
    public static func date(_ text: String) -> Date? {
        if let d = try? Date(text, strategy: .iso8601) { return d }
        return try? Date(text, strategy: Date.ISO8601FormatStyle(includingFractionalSeconds: true))
    }
}
