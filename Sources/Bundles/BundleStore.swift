#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif
import LinuxSupport
#if canImport(Glibc)
import Glibc
#endif

/// The installed bundles in `<home>/plugins/<identifier>`, changed only atomically: a staged bundle
/// (made by `supervisor-installer`) is swapped in with one renameat2(RENAME_EXCHANGE); the old
/// version stays in the staging folder until the new one runs, so it can be swapped back. A crash
/// at any point leaves the old or the new bundle complete. The next start deletes staging folders,
/// except an update's that had not ended (`cleanLeftovers`, BundleStore+Updates.swift): its previous
/// version goes back in place and the update is tried again.
public struct BundleStore: Sendable {
    public let home: String
    public var pluginsDirectory: String { home + "/plugins" }
    public var stagingRoot: String { home + "/staging" }

    public init(home: String) { self.home = home }

    /// A bundle checked and ready in the staging area.
    public struct Staged: Codable, Sendable {
        public var identifier: String
        public var version: String
        public var previous: String?
        /// The staging folder (deleted by `finish` or `rollBack`).
        public var folder: String
        /// The unpacked bundle inside it.
        public var bundle: String
        public var target: String

        public init(identifier: String, version: String, previous: String?, folder: String, bundle: String, target: String) {
            self.identifier = identifier
            self.version = version
            self.previous = previous
            self.folder = folder
            self.bundle = bundle
            self.target = target
        }
    }

    /// Swaps the staged bundle into place (atomically when one is installed).
    /// Afterwards the old bundle, if any, sits in the staging folder until `finish` or `rollBack`.
    public func swapIn(_ staged: Staged) throws(InstallError) {
        do {
            if FileSystem.exists(staged.target) {
                try FileSystem.exchange(staged.bundle, staged.target)
            } else {
                try FileSystem.rename(staged.bundle, to: staged.target)
            }
        } catch {
            throw InstallError(.fileSystem, "cannot put the new version of \(staged.identifier) in place: \(error)")
        }
        try? FileSystem.sync(pluginsDirectory)
    }

    /// Puts the old version back (or removes a first install).
    public func rollBack(_ staged: Staged) throws(InstallError) {
        if staged.previous != nil {
            do { try FileSystem.exchange(staged.bundle, staged.target) } catch {
                throw InstallError(.fileSystem, "cannot restore the previous version of \(staged.identifier): \(error)")
            }
        } else {
            Self.removeTree(staged.target)
        }
        try? FileSystem.sync(pluginsDirectory)
        unmark(staged)
        Self.removeTree(staged.folder)
    }

    /// The new version runs (or the staged one is not used): the other one and the staging folder go.
    public func finish(_ staged: Staged) {
        unmark(staged)
        Self.removeTree(staged.folder)
    }

    /// Removes an installed plugin's bundle (moved to staging first, so the removal is atomic).
    public func remove(_ identifier: String) throws(InstallError) {
        Self.removeTree(try takeOut(identifier))
    }

    /// Moves an installed plugin's bundle out of the plugins folder, into staging (one rename), and
    /// returns where it is now, for `removeTree`. An uninstall does this before it stops the
    /// plugin: a bundle that cannot be moved (a read-only or immutable folder) changes nothing. One
    /// left there by a supervisor that ended meanwhile goes at the next start (`cleanLeftovers`).
    public func takeOut(_ identifier: String) throws(InstallError) -> String {
        let target = pluginsDirectory + "/" + identifier
        guard FileSystem.exists(target) else { throw InstallError(.fileSystem, "\(identifier) is not installed in \(pluginsDirectory)") }
        do { try FileSystem.makeDirectories(stagingRoot) } catch { throw InstallError(.fileSystem, "\(error)") }
        let trash = stagingRoot + "/removed-" + identifier + "-" + String(UInt32.random(in: 0...UInt32.max), radix: 36)
        do { try FileSystem.rename(target, to: trash) } catch { throw InstallError(.fileSystem, "cannot remove \(target): \(error)") }
        try? FileSystem.sync(pluginsDirectory)
        return trash
    }

    public static func removeTree(_ path: String) {
        FileSystem.removeTree(path)
    }
}
