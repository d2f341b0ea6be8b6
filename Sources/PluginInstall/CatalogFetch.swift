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
///
/// The catalog is signed as a whole (SPEC §9, TUF's rollback and freeze attacks): a downloaded
/// catalog is accepted only with `<url>.sig` by a trusted, current, unrevoked key, an `expires` in the
/// future, and a `version` not below the last one accepted (kept in `<home>/state/catalog.json`,
/// written atomically), nor equal to it with other bytes. A cached copy is used only until it expires.
public struct CatalogFetch: Sendable {
    public let url: String
    public let home: String
    public var fetcher = Fetcher()
    public var integrity: Integrity
    /// Migration: a catalog without `.sig` is accepted with a warning (`catalogSignatures: "optional"`).
    public var signaturesOptional = false

    public init(url: String, home: String, integrity: Integrity) {
        self.url = url
        self.home = home
        self.integrity = integrity
        fetcher.maxBytes = 8 << 20
    }

    struct Validators: Codable { var etag: String?; var lastModified: String?; var url: String }

    /// What was last accepted from each catalog URL.
    struct Accepted: Codable { var version: Int; var sha256: String }

    var statePath: String { home + "/state/catalog.json" }

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
        let fetched = Result { () throws(InstallError) -> Fetcher.Outcome in
            try fetcher.fetch(url, to: temp, conditional: .init(etag: validators?.etag, lastModified: validators?.lastModified))
        }
        let outcome: Fetcher.Outcome
        switch fetched {
        case .success(let o): outcome = o
        case .failure(let failure):
            unlink(temp)
            guard failure.code == .downloadFailed, validators != nil, let bytes = try? FileSystem.readFile(cached, limit: 8 << 20) else { throw failure }
            return try usable(bytes, source: "cached (\(failure))")
        }
        switch outcome {
        case .notModified:
            // Only a conditional request (this URL's copy's validators) gets a 304 from `fetch`.
            guard validators != nil else { throw Fetcher.failure(url: url, reason: "the server answered HTTP 304 to a request that named no version") }
            // Accepted when it was downloaded; a 304 never makes an expired copy usable again.
            return try usable(try FileSystem.readFile(cached, limit: 8 << 20), source: "notModified")
        case .downloaded(_, let etag, let lastModified):
            let accepted: CatalogLoaded
            do { accepted = try accept(temp, into: cached) } catch {
                unlink(temp)
                throw error
            }
            let meta = try JSONEncoder().encode(Validators(etag: etag, lastModified: lastModified, url: url))
            try Data(meta).write(to: URL(fileURLWithPath: metaPath))
            return accepted
        }
    }

    /// A downloaded catalog: checked, then stored as the cached copy, with its version as the last accepted.
    private func accept(_ temp: String, into cached: String) throws -> CatalogLoaded {
        let bytes = try FileSystem.readFile(temp, limit: 8 << 20)
        let warning = try checkSignature(bytes)
        let document = try CatalogCache.parseDocument(bytes, url: url)
        let digest = Integrity.sha256Hex(bytes)
        try checkFreshness(document, digest: digest, signed: warning == nil)
        try FileSystem.rename(temp, to: cached)
        if let version = document.version {
            var all = acceptedVersions()
            all[url] = Accepted(version: version, sha256: digest)
            try FileSystem.writeAtomically(statePath, Array(try JSONEncoder().encode(all)))
        }
        return CatalogLoaded(entries: document.entries, source: "downloaded", warning: warning, version: document.version)
    }

    /// A copy accepted before: usable until it expires.
    private func usable(_ bytes: [UInt8], source: String) throws -> CatalogLoaded {
        let document = try CatalogCache.parseDocument(bytes, url: url)
        if let why = document.expiry() { throw InstallError(.catalogExpired, "\(why) (the cached copy; the server sent nothing newer)") }
        return CatalogLoaded(entries: document.entries, source: source, version: document.version)
    }

    /// Fetches and checks `<url>.sig`. Returns a warning when the catalog is unsigned and that is
    /// allowed; throws when it is refused.
    private func checkSignature(_ bytes: [UInt8]) throws -> String? {
        let text: String
        switch readSignatures() {
        case .success(let t): text = t
        case .failure(let why):
            if signaturesOptional {
                return "the catalog at \(url) is not signed (\(url).sig: \(why.why)); accepted because catalogSignatures is \"optional\""
            }
            throw InstallError(.catalogUnsigned, "the catalog at \(url) has no signature (\(url).sig: \(why.why)); a catalog must be signed by a trusted key, or set catalogSignatures to \"optional\" while migrating")
        }
        try integrity.verifyCatalog(bytes, signatures: text, url: url)
        return nil
    }

    /// `<url>.sig`'s text, or why it could not be had.
    private func readSignatures() -> Result<String, SignatureMissing> {
        let sigTemp = home + "/cache/catalog.json.sig.download"
        var sigFetcher = fetcher
        sigFetcher.maxBytes = 64 << 10
        let result: Result<String, SignatureMissing>
        do {
            _ = try sigFetcher.fetch(url + ".sig", to: sigTemp)
            result = .success(Integrity.signatureText(try FileSystem.readFile(sigTemp, limit: 64 << 10)))
        } catch {
            result = .failure(SignatureMissing(why: (error as? InstallError)?.message ?? "\(error)"))
        }
        unlink(sigTemp)
        return result
    }

    struct SignatureMissing: Error { var why: String }

    /// `expires` in the future; `version` not below the last accepted, nor equal with other bytes.
    private func checkFreshness(_ document: CatalogDocument, digest: String, signed: Bool) throws {
        if signed {
            guard document.version != nil else { throw InstallError(.catalogInvalid, "the catalog at \(url) carries no \"version\" (an integer)") }
            guard document.expires != nil else { throw InstallError(.catalogInvalid, "the catalog at \(url) carries no \"expires\" (an RFC 3339 time)") }
        }
        if let why = document.expiry() { throw InstallError(.catalogExpired, why) }
        guard let version = document.version, let last = acceptedVersions()[url] else { return }
        if version < last.version {
            throw InstallError(.catalogRollback, "the catalog at \(url) is version \(version), older than version \(last.version) accepted before: refused as a rollback")
        }
        if version == last.version && digest != last.sha256 {
            throw InstallError(.catalogRollback, "the catalog at \(url) is version \(version) again but with other contents: a publisher raises the version with every change; refused")
        }
    }

    private func acceptedVersions() -> [String: Accepted] {
        guard let raw = try? FileSystem.readFile(statePath, limit: 1 << 20),
              let all = try? JSONDecoder().decode([String: Accepted].self, from: Data(raw)) else { return [:] }
        return all
    }
}
