import Bundles
import LinuxSupport
#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif
#if canImport(Glibc)
import Glibc
#endif

/// The publisher's whole path as one step (`supervisor-installer publish`,
/// docs/install.md#publishing-for-a-fleet): a bundle folder becomes a signed archive beside the
/// catalog, and the catalog gets the entry (url, sha256, signature, length), a higher `version` and a
/// new `expires`, signed by the same key, so that every host's `supervisor update` takes it.
///
/// Nothing is half-written: the archive and each file are written to a temporary name and renamed;
/// the catalog's `.sig` first gets the new signature beside the old one, then the catalog is
/// renamed into place, then the old signature is dropped, so that at every moment the catalog on disk
/// verifies against its `.sig`, and an interrupted publish leaves a pair that hosts and the next
/// publish accept.
public struct CatalogPublisher {
    /// The catalog file (`catalog.json`); the archives go into its folder.
    public var catalog: String
    /// The publisher's private key file (`supervisor-installer keygen`).
    public var keyFile: String
    /// Where hosts download the archives from; nil: the entry's URL is the file name alone, resolved
    /// against the catalog's URL (archives served beside the catalog).
    public var baseURL: String?
    /// The new catalog's lifetime: `expires` is this many days from now.
    public var expiresDays = 7
    /// `onDemand` for the entry; nil keeps what the catalog had (none for a new entry).
    public var onDemand: Bool?
    public var now = Date()

    public init(catalog: String, keyFile: String) {
        self.catalog = catalog
        self.keyFile = keyFile
    }

    /// What a publish did.
    public struct Published: Sendable {
        public var identifier: String
        public var version: String
        public var archive: String
        public var url: String
        public var sha256: String
        public var length: Int
        public var catalogVersion: Int
        public var expires: String
        /// The version the catalog offered before, if any.
        public var previous: String?
        /// How many plugins the catalog offers now.
        public var plugins: Int
    }

    /// The private key in `keyFile`.
    func loadKey() throws -> Ed25519.PrivateKey {
        let text: [UInt8]
        do { text = try FileSystem.readFile(keyFile, limit: 4096) } catch {
            throw InstallError(.integrityFailed, "cannot read the key \(keyFile): \(error)")
        }
        guard let raw = Data(base64Encoded: String(decoding: text, as: UTF8.self).trimmingWhitespace()),
              let key = try? Ed25519.PrivateKey(rawRepresentation: raw) else {
            throw InstallError(.integrityFailed, "the key \(keyFile) is not a private key (base64 of a raw 32-byte Ed25519 key, as `supervisor-installer keygen` writes)")
        }
        return key
    }

    /// The catalog as it is now: its bytes and document, checked to be signed by `key`; nil when there is none yet.
    func currentCatalog(key: Ed25519.PrivateKey) throws -> (bytes: [UInt8], document: [String: JSONValue])? {
        guard FileSystem.exists(catalog) else {
            if FileSystem.exists(catalog + ".sig") {
                throw InstallError(.catalogInvalid, "\(catalog).sig is there but \(catalog) is not: remove the stray .sig, or restore the catalog it signs")
            }
            return nil
        }
        let bytes: [UInt8]
        do { bytes = try FileSystem.readFile(catalog, limit: 8 << 20) } catch {
            throw InstallError(.fileSystem, "cannot read the catalog \(catalog): \(error)")
        }
        // Signed by this publisher, or not re-signed at all: re-signing whatever lies in the folder
        // would vouch for entries this key never published.
        let publicKey = key.publicKey.rawRepresentation.base64EncodedString()
        guard let signatures = try? FileSystem.readFile(catalog + ".sig", limit: 64 << 10) else {
            throw InstallError(.catalogUnsigned, "the catalog \(catalog) has no signature (\(catalog).sig): it was not published with this command. "
                               + "If you vouch for its contents, sign it first (supervisor-installer sign \(catalog) --key \(keyFile) > \(catalog).sig)")
        }
        let integrity = try Integrity(trustedKeys: [publicKey])
        do {
            try integrity.verifyCatalog(bytes, signatures: Integrity.signatureText(signatures), url: catalog)
        } catch {
            throw InstallError(.catalogUnsigned, "the catalog \(catalog) is not signed by the key \(keyFile) (public key \(publicKey.prefix(12))…): "
                               + "it was changed since it was signed, or another key signed it; publish with that key, or restore the catalog")
        }
        // Readable by the hosts (the same parser and checks), and a document this command can extend.
        do { _ = try CatalogCache.parseDocument(bytes, url: catalog) } catch let error as InstallError {
            throw InstallError(.catalogInvalid, "the catalog \(catalog) cannot be read as hosts read it: \(error.message)")
        }
        guard case .object(let document)? = try? JSONDecoder().decode(JSONValue.self, from: Data(bytes)),
              case .array? = document["plugins"] else {
            throw InstallError(.catalogInvalid, "the catalog \(catalog) is not a {\"version\", \"expires\", \"plugins\": [...]} document (a bare list is an unsigned catalog of old); "
                               + "write it as one and sign it, or start a new catalog")
        }
        guard document["version"] == nil || document["version"]?.integer != nil else {
            throw InstallError(.catalogInvalid, "the catalog \(catalog): 'version' is not a whole number")
        }
        return (bytes, document)
    }

    /// Takes the catalog's folder for this process (flock on the folder): two publishes at once
    /// would each add their entry to the same old catalog, and one would be lost.
    func lockFolder(_ folder: String) throws -> Int32 {
        let fd = open(folder, O_RDONLY | O_DIRECTORY | O_CLOEXEC)
        guard fd >= 0 else { throw InstallError(.fileSystem, "cannot open the catalog's folder \(folder): \(String(cString: strerror(errno)))") }
        guard flock(fd, LOCK_EX | LOCK_NB) == 0 else {
            close(fd)
            throw InstallError(.conflict, "another publish into \(folder) is running; try again when it has finished")
        }
        return fd
    }

    /// What is wrong with the options, or nil: a base URL must be http(s) or file, and a catalog
    /// must expire between a day and ten years ahead.
    public static func problem(baseURL: String?, expiresDays: Int) -> String? {
        if let baseURL, !["http://", "https://", "file://"].contains(where: { baseURL.hasPrefix($0) && baseURL.count > $0.count }) {
            return "--base-url '\(baseURL)' is not an http://, https:// or file:// URL"
        }
        guard (1...3650).contains(expiresDays) else { return "--expires \(expiresDays): give a number of days from 1 to 3650" }
        return nil
    }

    public func publish(bundle given: String) throws -> Published {
        // The inputs, each checked before anything is written.
        let key = try loadKey()
        guard FileSystem.isDirectory(given) else {
            throw InstallError(.fileSystem, FileSystem.exists(given) ? "\(given) is not a folder (a bundle is a folder with plugin.json and the library)"
                                                                     : "the bundle folder \(given) does not exist")
        }
        let bundle = FileSystem.realPath(given) ?? given
        let manifest: Manifest
        do { manifest = try Manifest.load(bundle: bundle) } catch {
            throw InstallError(.invalidManifest, error.description)
        }
        for library in [manifest.library].compactMap({ $0 }) + manifest.variants.map(\.library) {
            var st = stat()
            guard stat(bundle + "/" + library, &st) == 0, st.st_mode & S_IFMT == S_IFREG else {
                throw InstallError(.invalidManifest, "\(bundle)/plugin.json names the library '\(library)', and \(bundle)/\(library) is not there; build it into the bundle folder first")
            }
        }
        if let problem = Self.problem(baseURL: baseURL, expiresDays: expiresDays) { throw InstallError(.conflict, problem) }
        let catalogPath = FileSystem.absolute(catalog)
        let parent = String(catalogPath[..<(catalogPath.lastIndex(of: "/") ?? catalogPath.startIndex)])
        let folder = parent.isEmpty ? "/" : parent
        guard FileSystem.isDirectory(folder) else {
            throw InstallError(.fileSystem, "the catalog's folder \(folder) does not exist; make it first (the archives go there too)")
        }
        let lock = try lockFolder(folder)
        defer { close(lock) }
        let current = try currentCatalog(key: key)

        // The archive, under a temporary name, checked the way `supervisor install` will check it.
        let identifier = manifest.identifier, version = manifest.version.description
        let name = "\(identifier)-\(version).tar.gz"
        let final = folder + "/" + name
        let temp = folder + "/.publishing-\(getpid())-" + name
        let check = folder + "/.publishing-\(getpid())-check"
        unlink(temp)
        FileSystem.removeTree(check)
        defer { unlink(temp); FileSystem.removeTree(check) }
        try BundleArchiver().pack(bundle, top: identifier, into: temp)
        do {
            try FileSystem.makeDirectories(check)
            try ArchiveExtractor().extract(temp, into: check, name: name)
            let unpacked = try Manifest.load(bundle: check + "/" + identifier)
            guard unpacked.identifier == identifier, unpacked.version == manifest.version else {
                throw InstallError(.internalError, "the archive \(name) unpacks to \(unpacked.identifier) \(unpacked.version), not \(identifier) \(version)")
            }
        } catch {
            let code: InstallError.Code = (error as? InstallError)?.code ?? (error is ManifestError ? .invalidManifest : .fileSystem)
            throw InstallError(code, "the archive made from \(bundle) would not install: \(error)")
        }
        let bytes: [UInt8]
        do { bytes = try FileSystem.readFile(temp, limit: Int(BundleArchiver().maxTotalBytes) * 2) } catch {
            throw InstallError(.fileSystem, "cannot read back \(temp): \(error)")
        }
        let sha256 = Integrity.sha256Hex(bytes)
        let signature = try key.signature(for: bytes).base64EncodedString()
        let url = baseURL.map { $0.hasSuffix("/") ? $0 + name : $0 + "/" + name } ?? name

        // The new catalog: the entry replaced or added, everything else kept.
        var document = current?.document ?? [:]
        var plugins = document["plugins"]?.array ?? []
        let index = plugins.firstIndex { $0.object?["identifier"]?.string == identifier }
        var entry = index.flatMap { plugins[$0].object } ?? [:]
        let previous = entry["version"]?.string
        if let previous, let old = SemanticVersion(previous) {
            if old > manifest.version {
                throw InstallError(.versionRefused, "the catalog \(catalog) offers \(identifier) \(previous), newer than this bundle's \(version): hosts would not take it. "
                                   + "Raise 'version' in \(bundle)/plugin.json above \(previous)")
            }
            if old == manifest.version, entry["sha256"]?.string?.lowercased() != sha256 {
                throw InstallError(.versionRefused, "the catalog \(catalog) already offers \(identifier) \(version) with other contents: hosts that have \(version) "
                                   + "would never get this one. Raise 'version' in \(bundle)/plugin.json")
            }
        }
        entry["identifier"] = .string(identifier)
        entry["version"] = .string(version)
        entry["url"] = .string(url)
        entry["sha256"] = .string(sha256)
        entry["signature"] = .string(signature)
        entry["length"] = .integer(bytes.count)
        if let onDemand { entry["onDemand"] = .bool(onDemand) }
        if let index { plugins[index] = .object(entry) } else { plugins.append(.object(entry)) }
        let catalogVersion = (document["version"]?.integer ?? 0) + 1
        let expires = now.addingTimeInterval(TimeInterval(expiresDays) * 86_400).formatted(Date.ISO8601FormatStyle())
        document["plugins"] = .array(plugins)
        document["version"] = .integer(catalogVersion)
        document["expires"] = .string(expires)
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.prettyPrinted, .sortedKeys, .withoutEscapingSlashes]
        let newBytes = Array(try encoder.encode(JSONValue.object(document))) + [0x0A]
        do { _ = try CatalogCache.parseDocument(newBytes, url: catalog) } catch let error as InstallError {
            throw InstallError(.internalError, "the new catalog would not read back: \(error.message)")
        }
        let newSignature = try key.signature(for: newBytes).base64EncodedString()

        // Written in an order that leaves every moment consistent: the archive and its signature,
        // then the .sig with both catalogs' signatures, the catalog, and the .sig with the new one alone.
        do {
            try FileSystem.rename(temp, to: final)
            try FileSystem.writeAtomically(final + ".sig", Array((signature + "\n").utf8), mode: 0o644)
            if let current {
                let old = try key.signature(for: current.bytes).base64EncodedString()
                try FileSystem.writeAtomically(catalogPath + ".sig", Array((old + "\n" + newSignature + "\n").utf8), mode: 0o644)
            }
            try FileSystem.writeAtomically(catalogPath, newBytes, mode: 0o644)
            try FileSystem.writeAtomically(catalogPath + ".sig", Array((newSignature + "\n").utf8), mode: 0o644)
            try FileSystem.sync(folder)
        } catch let error as SystemError {
            throw InstallError(.fileSystem, "publishing into \(folder) failed: \(error); the catalog there is the old one or the new one, each with a signature that matches it")
        }
        return Published(identifier: identifier, version: version, archive: final, url: url, sha256: sha256, length: bytes.count,
                         catalogVersion: catalogVersion, expires: expires, previous: previous, plugins: plugins.count)
    }
}
