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

/// Prepares an install in `<home>/staging`: the archive's bytes (downloaded, or a private copy of a
/// local file), its digest and signature, a safe unpacking, the manifest against the catalog entry
/// and the installed version, and one load in a sandboxed worker. The swap itself is
/// `BundleStore.swapIn`, done by the supervisor (or the CLI, offline).
public struct Stager: Sendable {
    public let store: BundleStore
    public var fetcher = Fetcher()
    public var extractor = ArchiveExtractor()
    public var integrity: Integrity
    public var workerExecutable: String
    public var runtimePaths: [String]
    public var sandbox = true
    /// Plugins the supervisor runs from other folders (identifier → bundle): installs refuse them.
    public var otherBundles: [String: String] = [:]

    public init(home: String, trustedKeys: [String], workerExecutable: String, runtimePaths: [String]) throws {
        self.store = BundleStore(home: home)
        self.integrity = try Integrity(trustedKeys: trustedKeys)
        self.workerExecutable = workerExecutable
        self.runtimePaths = runtimePaths
    }

    /// Progress of a stage: `(stage, done, total)` with stage `download`, `verify`, `unpack`, `preflight`.
    public typealias Progress = (String, Int64, Int64) -> Void

    /// Everything up to (not including) the swap. `source` is a local archive path or a URL;
    /// `entry`, when the install comes from the catalog, gives the expected identifier, version,
    /// digest and signature. Without an entry the signature is read from `<source>.sig`.
    public func stage(source: String, entry: CatalogEntry?, force: Bool, allowUnsigned: Bool, progress: Progress? = nil,
                      spawned: (pid_t) -> Void = { _ in }) throws -> BundleStore.Staged {
        try FileSystem.makeDirectories(store.stagingRoot)
        try FileSystem.makeDirectories(store.pluginsDirectory)
        let folder = store.stagingRoot + "/" + String(UInt64.random(in: 0...UInt64.max), radix: 36)
        try FileSystem.makeDirectories(folder)
        do {
            return try stage(source: source, entry: entry, force: force, allowUnsigned: allowUnsigned, folder: folder,
                             progress: progress, spawned: spawned)
        } catch {
            BundleStore.removeTree(folder)
            throw error
        }
    }

    private func stage(source: String, entry: CatalogEntry?, force: Bool, allowUnsigned: Bool, folder: String,
                       progress: Progress?, spawned: (pid_t) -> Void) throws -> BundleStore.Staged {
        // 1. The archive's bytes: verified and unpacked from one private copy.
        let isURL = source.contains("://")
        let archive = folder + "/archive"
        if isURL {
            var fetcher = self.fetcher
            // The catalog's length: a server that streams more is cut off (the endless-data attack).
            if let length = entry?.length { fetcher.maxBytes = min(fetcher.maxBytes, Int64(length)) }
            do {
                _ = try fetcher.fetch(source, to: archive) { done, total in progress?("download", done, total) }
            } catch {
                if let length = entry?.length, error.code == .downloadFailed, error.message.contains("larger than the limit") {
                    throw InstallError(.integrityFailed, "\(source) streams past the \(length) bytes its catalog entry gives as its length; cut off")
                }
                throw error
            }
        } else {
            guard FileSystem.exists(source) else { throw InstallError(.archiveRefused, "\(source): no such archive") }
            let original = try FileSystem.readFile(source, limit: Int(fetcher.maxBytes))
            try FileSystem.writeAtomically(archive, original)
        }
        let bytes = try FileSystem.readFile(archive, limit: Int(fetcher.maxBytes))
        progress?("verify", Int64(bytes.count), Int64(bytes.count))

        // 2. Integrity: the catalog's digest and signature, or a detached `<source>.sig`.
        var signature = entry?.signature
        if entry == nil {
            let sigPath = folder + "/archive.sig"
            if isURL {
                // Nothing published beside it (404): an unsigned archive. A signature that could not
                // be fetched (a server error, a timeout) is not a missing one: the install stops.
                let published: Fetcher.Outcome?
                do throws(InstallError) { published = try fetcher.fetchIfPublished(source + ".sig", to: sigPath) } catch {
                    throw InstallError(.downloadFailed, "the archive's signature could not be fetched (\(error.message)); nothing was installed")
                }
                if case .downloaded = published {
                    signature = try Self.signature(at: sigPath, named: source + ".sig")
                }
            } else if FileSystem.exists(source + ".sig") {
                signature = try Self.signature(at: source + ".sig", named: source + ".sig")
            }
        }
        if signature == nil, entry?.sha256 == nil, allowUnsigned {
            // Explicitly allowed (development): nothing to check.
        } else {
            try integrity.verify(bytes, sha256: entry?.sha256, signature: signature, what: entry.map { "\($0.identifier) \($0.version)" } ?? source)
        }

        // 3. Unpack.
        progress?("unpack", 0, 0)
        let unpacked = folder + "/unpacked"
        try FileSystem.makeDirectories(unpacked)
        let links = try extractor.extract(archive, into: unpacked, name: source)
        let bundle = try Self.bundleRoot(unpacked, archive: source)
        // Each link leads somewhere in the bundle's own folder, which is all that is installed. A
        // bundle at the archive's root was checked as the archive was unpacked.
        if bundle != unpacked, let (path, target) = ArchiveExtractor.linkLeaving([String(bundle.dropFirst(unpacked.count + 1))], links: links) {
            throw ArchiveExtractor.refusal(archive: source, entry: path, reason: "symbolic link '\(target)' leaves the bundle")
        }

        // 4. The manifest against the catalog and what is installed.
        let manifest = try Self.manifest(bundle, unpacked: unpacked, source: source)
        if let entry {
            guard manifest.identifier == entry.identifier, manifest.version.description == SemanticVersion(entry.version)?.description else {
                throw InstallError(.versionRefused, "\(source) holds \(manifest.identifier) \(manifest.version), but the catalog entry is \(entry.identifier) \(entry.version)")
            }
        }
        if let elsewhere = otherBundles[manifest.identifier] {
            throw InstallError(.conflict, "\(manifest.identifier) is provided by \(elsewhere), outside \(store.pluginsDirectory); installs manage only that folder")
        }
        let target = store.pluginsDirectory + "/" + manifest.identifier
        var previous: SemanticVersion?
        if FileSystem.exists(target + "/plugin.json"), let installed = try? Manifest.load(bundle: target) {
            previous = installed.version
            if manifest.version < installed.version, !force {
                throw InstallError(.versionRefused, "\(manifest.identifier) \(manifest.version) is older than the installed \(installed.version); use --force to downgrade")
            }
        }

        // 5. Load it once, sandboxed.
        progress?("preflight", 0, 0)
        let library = try VariantSelector.choose(manifest, sandbox: sandbox).path
        try Preflight.run(manifest: manifest, library: library, scratch: folder + "/preflight",
                          workerExecutable: workerExecutable, runtimePaths: runtimePaths, sandbox: sandbox, spawned: spawned)
        return BundleStore.Staged(identifier: manifest.identifier, version: manifest.version.description,
                                  previous: previous?.description, folder: folder, bundle: bundle, target: target)
    }

    /// The folder holding plugin.json: the archive's root, or its single top-level folder.
    static func bundleRoot(_ unpacked: String, archive: String) throws -> String {
        if FileSystem.exists(unpacked + "/plugin.json") { return unpacked }
        let names = (try? FileSystem.list(unpacked)) ?? []
        let bundles = names.filter { FileSystem.exists(unpacked + "/" + $0 + "/plugin.json") }
        guard bundles.count == 1 else {
            throw InstallError(.archiveRefused, "\(archive) must hold exactly one plugin bundle (a plugin.json at its root or in its one top folder); found \(bundles.count)")
        }
        guard names.count == 1 else {
            let others = names.filter { $0 != bundles[0] }
            throw InstallError(.archiveRefused, "\(archive) holds \(others.map { "'\($0)'" }.joined(separator: ", ")) beside its bundle folder '\(bundles[0])'; a plugin archive holds its one bundle folder and nothing else (or the bundle's files at its root)")
        }
        return unpacked + "/" + bundles[0]
    }
}

extension Stager {
    /// The unpacked bundle's manifest; a fault in it is named as the archive holds it (`source`:
    /// `<folder>/plugin.json`): the staging folder it was unpacked in is gone by then.
    static func manifest(_ bundle: String, unpacked: String, source: String) throws -> Manifest {
        do { return try Manifest.load(bundle: bundle) } catch {
            guard let fault = error as? ManifestError else { throw error }
            let inArchive = (bundle == unpacked ? "" : String(bundle.dropFirst(unpacked.count + 1)) + "/") + "plugin.json"
            throw ManifestError(file: source + ": " + inArchive, field: fault.field, reason: fault.reason, place: fault.place)
        }
    }

    /// The most a detached signature file may hold (one signature is 64 bytes, or 88 in base64).
    static let largestSignatureFile = 4096

    /// A detached signature's text, from the file at `path` (as the user knows it: `name`).
    static func signature(at path: String, named name: String) throws -> String {
        var st = stat()
        if stat(path, &st) == 0, Int(st.st_size) > largestSignatureFile {
            throw InstallError(.integrityFailed, "\(name) holds \(st.st_size) bytes, more than a signature file may (\(largestSignatureFile))")
        }
        let text = Integrity.signatureText(try FileSystem.readFile(path, limit: largestSignatureFile))
        guard text.contains(where: { !$0.isWhitespace }) else { throw InstallError(.integrityFailed, "\(name) is empty: it holds no signature") }
        return text
    }
}
