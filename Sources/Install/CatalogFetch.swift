#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif
import Bundles
import LinuxSupport
#if canImport(Glibc)
import Glibc
#endif

/// Fetches the plugin catalog with a conditional GET into `<home>/cache/` (a 304 costs nothing);
/// its last good copy is used when the server cannot be reached, and a bad catalog never replaces it.
public struct CatalogFetch: Sendable {
    public let url: String
    public let home: String
    public var fetcher = Fetcher()

    public init(url: String, home: String) {
        self.url = url
        self.home = home
        fetcher.maxBytes = 8 << 20
    }

    struct Validators: Codable { var etag: String?; var lastModified: String?; var url: String }

    public func load() throws -> CatalogLoaded {
        let cacheDirectory = home + "/cache"
        try FileSystem.makeDirectories(cacheDirectory)
        let cached = CatalogCache.path(home: home)
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
                return CatalogLoaded(entries: try CatalogCache.parse(try FileSystem.readFile(cached, limit: 8 << 20), url: url), source: "notModified")
            case .downloaded(_, let etag, let lastModified):
                let bytes = try FileSystem.readFile(temp, limit: 8 << 20)
                let entries: [CatalogEntry]
                do { entries = try CatalogCache.parse(bytes, url: url) } catch {
                    unlink(temp)
                    throw error
                }
                guard rename(temp, cached) == 0 else { throw InstallError(.fileSystem, "cannot store the catalog in \(cacheDirectory)") }
                let meta = try JSONEncoder().encode(Validators(etag: etag, lastModified: lastModified, url: url))
                try Data(meta).write(to: URL(fileURLWithPath: metaPath))
                return CatalogLoaded(entries: entries, source: "downloaded")
            }
        } catch let failure as InstallError where failure.code == .downloadFailed {
            unlink(temp)
            guard validators != nil, let bytes = try? FileSystem.readFile(cached, limit: 8 << 20) else { throw failure }
            return CatalogLoaded(entries: try CatalogCache.parse(bytes, url: url), source: "cached (\(failure))")
        }
    }
}
