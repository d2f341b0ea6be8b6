#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif
import CInstallSupport
#if canImport(Glibc)
import Glibc
#endif

/// Installs plugins into `<home>/plugins/<identifier>` atomically: download (or read) the archive
/// into a staging folder, check its digest and signature, unpack it safely, check its manifest
/// against the catalog and the installed version, load it once in a sandboxed worker, then swap it
/// into place with one renameat2(RENAME_EXCHANGE). The old version stays in the staging folder until
/// the new one runs, so it can be swapped back. A crash at any point leaves the old or the new
/// bundle complete; the next start deletes the staging folders.
public struct Installer: Sendable {
    public let home: String
    public var fetcher = Fetcher()
    public var extractor = ArchiveExtractor()
    public var integrity: Integrity
    public var workerExecutable: String
    public var runtimePaths: [String]
    public var sandbox = true
    /// Plugins the supervisor runs from other folders (identifier → bundle): installs refuse them.
    public var otherBundles: [String: String] = [:]

    public var pluginsDirectory: String { home + "/plugins" }
    public var stagingRoot: String { home + "/staging" }

    public init(home: String, trustedKeys: [String], workerExecutable: String, runtimePaths: [String]) throws {
        self.home = home
        self.integrity = try Integrity(trustedKeys: trustedKeys)
        self.workerExecutable = workerExecutable
        self.runtimePaths = runtimePaths
    }

    public struct Options: Sendable {
        public var force = false
        public var allowUnsigned = false
        public init(force: Bool = false, allowUnsigned: Bool = false) {
            self.force = force
            self.allowUnsigned = allowUnsigned
        }
    }

    /// A bundle checked and ready in the staging area.
    public struct Staged: Sendable {
        public var identifier: String
        public var version: SemanticVersion
        public var previous: SemanticVersion?
        /// The staging folder (deleted by `finish` or `abandon`).
        public var folder: String
        /// The unpacked bundle inside it.
        public var bundle: String
        public var target: String
    }

    /// Progress of a stage: `(stage, done, total)` with stage `download`, `verify`, `unpack`, `preflight`.
    public typealias Progress = @Sendable (String, Int64, Int64) -> Void

    /// Deletes what interrupted installs left behind.
    public func cleanLeftovers() {
        for name in (try? FileSystem.list(stagingRoot)) ?? [] { Self.removeTree(stagingRoot + "/" + name) }
    }

    /// Everything up to (not including) the swap. `source` is a local archive path or a URL;
    /// `entry`, when the install comes from the catalog, gives the expected identifier, version,
    /// digest and signature. Without an entry the signature is read from `<source>.sig`.
    public func stage(source: String, entry: CatalogEntry?, options: Options, progress: Progress? = nil,
                      spawned: (pid_t) -> Void = { _ in }, reap: (pid_t) -> Void = { _ in }) throws -> Staged {
        try FileSystem.makeDirectories(stagingRoot)
        try FileSystem.makeDirectories(pluginsDirectory)
        let folder = stagingRoot + "/" + String(UInt64.random(in: 0...UInt64.max), radix: 36)
        try FileSystem.makeDirectories(folder)
        do {
            return try stage(source: source, entry: entry, options: options, folder: folder, progress: progress, spawned: spawned, reap: reap)
        } catch {
            Self.removeTree(folder)
            throw error
        }
    }

    private func stage(source: String, entry: CatalogEntry?, options: Options, folder: String, progress: Progress?,
                       spawned: (pid_t) -> Void, reap: (pid_t) -> Void) throws -> Staged {
        // 1. The archive's bytes.
        let isURL = source.contains("://")
        let archive: String
        if isURL {
            archive = folder + "/archive"
            _ = try fetcher.fetch(source, to: archive) { done, total in progress?("download", done, total) }
        } else {
            guard FileSystem.exists(source) else { throw InstallError("\(source): no such archive") }
            // Verify and unpack the same bytes: a private copy, not the path someone else can rewrite.
            archive = folder + "/archive"
            let original = try FileSystem.readFile(source, limit: Int(fetcher.maxBytes))
            try Data(original).write(to: URL(fileURLWithPath: archive))
        }
        let bytes = try FileSystem.readFile(archive, limit: Int(fetcher.maxBytes))
        progress?("verify", Int64(bytes.count), Int64(bytes.count))

        // 2. Integrity: the catalog's digest and signature, or a detached `<source>.sig`.
        var signature = entry?.signature
        if entry == nil {
            let sigPath = folder + "/archive.sig"
            if isURL {
                if case .downloaded = (try? fetcher.fetch(source + ".sig", to: sigPath)) ?? .notModified {
                    signature = String(decoding: try FileSystem.readFile(sigPath, limit: 4096), as: UTF8.self)
                }
            } else if FileSystem.exists(source + ".sig") {
                signature = String(decoding: try FileSystem.readFile(source + ".sig", limit: 4096), as: UTF8.self)
            }
        }
        if signature == nil, entry?.sha256 == nil, options.allowUnsigned {
            // Explicitly allowed (development): nothing to check.
        } else {
            try integrity.verify(bytes, sha256: entry?.sha256, signature: signature, what: entry.map { "\($0.identifier) \($0.version)" } ?? source)
        }

        // 3. Unpack.
        progress?("unpack", 0, 0)
        let unpacked = folder + "/unpacked"
        try FileSystem.makeDirectories(unpacked)
        try extractor.extract(archive, into: unpacked, name: source)
        let bundle = try Self.bundleRoot(unpacked, archive: source)

        // 4. The manifest against the catalog and what is installed.
        let manifest = try Manifest.load(bundle: bundle)
        if let entry {
            guard manifest.identifier == entry.identifier, manifest.version.description == SemanticVersion(entry.version)?.description else {
                throw InstallError("\(source) holds \(manifest.identifier) \(manifest.version), but the catalog entry is \(entry.identifier) \(entry.version)")
            }
        }
        if let elsewhere = otherBundles[manifest.identifier] {
            throw InstallError("\(manifest.identifier) is provided by \(elsewhere), outside \(pluginsDirectory); installs manage only that folder")
        }
        let target = pluginsDirectory + "/" + manifest.identifier
        var previous: SemanticVersion?
        if FileSystem.exists(target + "/plugin.json"), let installed = try? Manifest.load(bundle: target) {
            previous = installed.version
            if manifest.version < installed.version, !options.force {
                throw InstallError("\(manifest.identifier) \(manifest.version) is older than the installed \(installed.version); use --force to downgrade")
            }
            if manifest.version == installed.version, !options.force {
                throw InstallError("\(manifest.identifier) \(manifest.version) is already installed; use --force to reinstall")
            }
        }

        // 5. Load it once, sandboxed.
        progress?("preflight", 0, 0)
        let library = try VariantSelector.choose(manifest, sandbox: sandbox).path
        let pid = try Preflight.run(manifest: manifest, library: library, scratch: folder + "/preflight",
                                    workerExecutable: workerExecutable, runtimePaths: runtimePaths, sandbox: sandbox, spawned: spawned)
        reap(pid)
        return Staged(identifier: manifest.identifier, version: manifest.version, previous: previous, folder: folder, bundle: bundle, target: target)
    }

    /// The folder holding plugin.json: the archive's root, or its single top-level folder.
    static func bundleRoot(_ unpacked: String, archive: String) throws -> String {
        if FileSystem.exists(unpacked + "/plugin.json") { return unpacked }
        let names = (try? FileSystem.list(unpacked)) ?? []
        let bundles = names.filter { FileSystem.exists(unpacked + "/" + $0 + "/plugin.json") }
        guard bundles.count == 1, names.count == 1 else {
            throw InstallError("\(archive) must hold exactly one plugin bundle (a plugin.json at its root or in its one top folder); found \(bundles.count)")
        }
        return unpacked + "/" + bundles[0]
    }

    /// Swaps the staged bundle into place (atomically when one is installed).
    /// Afterwards the old bundle, if any, sits in the staging folder until `finish` or `rollBack`.
    public func swapIn(_ staged: Staged) throws {
        if FileSystem.exists(staged.target) {
            let rc = cis_exchange(staged.bundle, staged.target)
            guard rc == 0 else { throw InstallError("cannot swap \(staged.target) for the new version: \(String(cString: strerror(-rc)))") }
        } else {
            guard rename(staged.bundle, staged.target) == 0 else {
                throw InstallError("cannot move the new bundle to \(staged.target): \(String(cString: strerror(errno)))")
            }
        }
        _ = cis_fsync_path(pluginsDirectory)
    }

    /// Puts the old version back (or removes a first install).
    public func rollBack(_ staged: Staged) throws {
        if staged.previous != nil {
            let rc = cis_exchange(staged.bundle, staged.target)
            guard rc == 0 else { throw InstallError("cannot restore the previous version: \(String(cString: strerror(-rc)))") }
        } else {
            Self.removeTree(staged.target)
        }
        _ = cis_fsync_path(pluginsDirectory)
        Self.removeTree(staged.folder)
    }

    /// The new version runs: the old one and the staging folder go.
    public func finish(_ staged: Staged) {
        Self.removeTree(staged.folder)
    }

    /// Removes an installed plugin's bundle (moved to staging first, so the removal is atomic).
    public func remove(_ identifier: String) throws {
        let target = pluginsDirectory + "/" + identifier
        guard FileSystem.exists(target) else { throw InstallError("\(identifier) is not installed in \(pluginsDirectory)") }
        try FileSystem.makeDirectories(stagingRoot)
        let trash = stagingRoot + "/removed-" + identifier + "-" + String(UInt32.random(in: 0...UInt32.max), radix: 36)
        guard rename(target, trash) == 0 else { throw InstallError("cannot remove \(target): \(String(cString: strerror(errno)))") }
        _ = cis_fsync_path(pluginsDirectory)
        Self.removeTree(trash)
    }

    static func removeTree(_ path: String) {
        try? FileManager.default.removeItem(atPath: path)
    }
}

public struct InstallError: Error, CustomStringConvertible, Sendable {
    public var description: String
    public init(_ d: String) { description = d }
}
