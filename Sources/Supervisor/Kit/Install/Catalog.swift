#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif
#if canImport(Glibc)
import Glibc
#endif

/// One plugin the catalog offers (SPEC §9).
public struct CatalogEntry: Codable, Sendable, Equatable {
    public var identifier: String
    public var version: String
    public var url: String
    public var sha256: String?
    public var signature: String?
    public var onDemand: Bool?
}

/// The plugin catalog: fetched with conditional GET into `<home>/cache/`, whose copy is used when the
/// server cannot be reached.
public struct CatalogClient: Sendable {
    public let url: String
    public let cacheDirectory: String
    public var fetcher = Fetcher()

    public init(url: String, home: String) {
        self.url = url
        self.cacheDirectory = home + "/cache"
        fetcher.maxBytes = 8 << 20
    }

    struct Validators: Codable { var etag: String?; var lastModified: String?; var url: String }

    public struct Loaded: Sendable {
        public var entries: [CatalogEntry]
        /// How it was obtained: `downloaded`, `notModified` (304: the cached copy is current), or
        /// `cached` (the server failed; the last good copy is used) with why.
        public var source: String
    }

    /// Fetches the catalog (a 304 costs nothing) and parses it; falls back to the cached copy.
    public func load() throws -> Loaded {
        try FileSystem.makeDirectories(cacheDirectory)
        let cached = cacheDirectory + "/catalog.json"
        let metaPath = cacheDirectory + "/catalog.meta.json"
        var validators: Validators?
        if let raw = try? FileSystem.readFile(metaPath, limit: 1 << 16), let v = try? JSONDecoder().decode(Validators.self, from: Data(raw)),
           v.url == url, FileSystem.exists(cached) {
            validators = v
        }
        let temp = cacheDirectory + "/catalog.json.download"
        do {
            switch try fetcher.fetch(url, to: temp, conditional: .init(etag: validators?.etag, lastModified: validators?.lastModified)) {
            case .notModified:
                return Loaded(entries: try Self.parse(try FileSystem.readFile(cached, limit: 8 << 20), url: url), source: "notModified")
            case .downloaded(_, let etag, let lastModified):
                let bytes = try FileSystem.readFile(temp, limit: 8 << 20)
                let entries = try Self.parse(bytes, url: url)  // a bad catalog never replaces a good one
                guard rename(temp, cached) == 0 else { throw CatalogError("cannot store the catalog in \(cacheDirectory)") }
                let meta = try JSONEncoder().encode(Validators(etag: etag, lastModified: lastModified, url: url))
                try Data(meta).write(to: URL(fileURLWithPath: metaPath))
                return Loaded(entries: entries, source: "downloaded")
            }
        } catch let failure as Fetcher.Failure {
            unlink(temp)
            guard let bytes = try? FileSystem.readFile(cached, limit: 8 << 20) else { throw failure }
            return Loaded(entries: try Self.parse(bytes, url: url), source: "cached (\(failure))")
        }
    }

    /// The cached copy only (for on-demand installs without a round trip).
    public func cachedEntries() -> [CatalogEntry] {
        guard let bytes = try? FileSystem.readFile(cacheDirectory + "/catalog.json", limit: 8 << 20) else { return [] }
        return (try? Self.parse(bytes, url: url)) ?? []
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
                throw CatalogError("the catalog at \(url) is not a list of {identifier, version, url, sha256, signature}: \(error)")
            }
        }
        for (i, e) in entries.enumerated() {
            guard SemanticVersion(e.version) != nil else {
                throw CatalogError("catalog entry \(i) (\(e.identifier)): '\(e.version)' is not a semantic version")
            }
            if !e.url.contains("://") {
                let base = url[..<(url.lastIndex(of: "/") ?? url.endIndex)]
                entries[i].url = base + "/" + e.url
            }
        }
        return entries
    }
}

public struct CatalogError: Error, CustomStringConvertible, Sendable {
    public var description: String
    public init(_ d: String) { description = d }
}
