#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif
import LinuxSupport
import PluginProtocol
#if canImport(Glibc)
import Glibc
#endif

/// An update under way, on disk: `update.json` beside its staged bundle, written before the swap and
/// deleted first when the update ends (`finish`, `rollBack`). One still there at start is an update
/// whose new version had not proved itself (started, then ran through its grace period) when the
/// supervisor ended: the previous version goes back in place, and the update is applied again.
/// Which folder holds which version is told by the folders' inodes, which a swap
/// (renameat2(RENAME_EXCHANGE)) keeps: not by their versions (a version installed again is the same
/// version) nor by their paths (a home can be named another way at the next start).
extension BundleStore {
    static let updateMark = "update.json"

    struct UpdateMark: Codable {
        /// The plugin, and the version the update brings.
        var identifier: String
        var version: String
        /// The staged bundle, inside its staging folder.
        var bundleName: String
        /// The installed version before the update, and the inodes of the two folders.
        var previous: String
        var inodes: Inodes

        struct Inodes: Codable, Equatable {
            var new: UInt64
            var previous: UInt64
        }
    }

    /// Marks `staged`, an update of an installed plugin, as under way until it ends.
    public func markUpdate(_ staged: Staged) throws(InstallError) {
        guard let previous = staged.previous, staged.bundle.hasPrefix(staged.folder + "/"),
              let newInode = Self.inode(staged.bundle), let previousInode = Self.inode(staged.target) else {
            throw InstallError(.fileSystem, "cannot note the update of \(staged.identifier) in \(staged.folder): its folders cannot be read")
        }
        let mark = UpdateMark(identifier: staged.identifier, version: staged.version, bundleName: String(staged.bundle.dropFirst(staged.folder.count + 1)),
                              previous: previous, inodes: UpdateMark.Inodes(new: newInode, previous: previousInode))
        do {
            try FileSystem.writeAtomically(staged.folder + "/" + Self.updateMark, Array(try JSONEncoder().encode(mark)))
            try FileSystem.sync(staged.folder)
        } catch {
            throw InstallError(.fileSystem, "cannot note the update of \(staged.identifier) in \(staged.folder): \(error)")
        }
    }

    /// The update has ended: its mark goes first, so that a crash while its folder is deleted
    /// leaves a leftover, not an update to resume from half a bundle.
    func unmark(_ staged: Staged) {
        guard unlink(staged.folder + "/" + Self.updateMark) == 0 else { return }
        try? FileSystem.sync(staged.folder)
    }

    /// Deletes what interrupted installs left behind, and returns the updates that had not ended,
    /// each as it was before its swap: the previous version back in `<home>/plugins` (swapped back
    /// if the new one was in place), the new one in its staging folder, to be applied again.
    /// `resuming` false (a binary taking over running workers in an upgrade): marked folders are
    /// left as they are, for a later start.
    public func cleanLeftovers(resuming: Bool = true) -> [Staged] {
        var interrupted: [Staged] = []
        for name in (try? FileSystem.list(stagingRoot)) ?? [] {
            let folder = stagingRoot + "/" + name
            guard let mark = Self.mark(in: folder) else {
                Self.removeTree(folder)
                continue
            }
            guard resuming else { continue }
            if let staged = putBack(mark, folder: folder) {
                interrupted.append(staged)
            } else {
                Self.removeTree(folder)
            }
        }
        return interrupted
    }

    private static func mark(in folder: String) -> UpdateMark? {
        guard let bytes = try? FileSystem.readFile(folder + "/" + updateMark, limit: 1 << 16) else { return nil }
        return try? JSONDecoder().decode(UpdateMark.self, from: Data(bytes))
    }

    /// The marked update as it was before its swap; nil when its folders are not the two it names
    /// (a later install replaced the plugin, or its files are gone): then it is only a leftover.
    private func putBack(_ mark: UpdateMark, folder: String) -> Staged? {
        guard !mark.bundleName.isEmpty, !mark.bundleName.contains(".."), PluginIdentifier.problem(mark.identifier) == nil else { return nil }
        let staged = Staged(identifier: mark.identifier, version: mark.version, previous: mark.previous, folder: folder,
                            bundle: folder + "/" + mark.bundleName, target: pluginsDirectory + "/" + mark.identifier)
        switch (Self.inode(staged.target), Self.inode(staged.bundle)) {
        case (mark.inodes.previous, mark.inodes.new):
            return staged
        case (mark.inodes.new, mark.inodes.previous):
            // Only a previous version that is whole goes back (its manifest reads as the version
            // it names, its libraries are there): else the new one stays, unproven but runnable.
            guard Self.isWhole(staged.bundle, version: mark.previous) else { return nil }
            do { try FileSystem.exchange(staged.bundle, staged.target) } catch { return nil }
            try? FileSystem.sync(pluginsDirectory)
            return staged
        default:
            return nil
        }
    }

    /// Whether the bundle at `path` reads as `version` with every library it names present.
    static func isWhole(_ path: String, version: String) -> Bool {
        guard let manifest = try? Manifest.load(bundle: path), "\(manifest.version)" == version else { return false }
        let libraries = (manifest.library.map { [$0] } ?? []) + manifest.variants.map(\.library)
        return !libraries.isEmpty && libraries.allSatisfy { FileSystem.exists(path + "/" + $0) }
    }

    /// The inode of the folder at `path` (not followed if it is a link), or nil.
    static func inode(_ path: String) -> UInt64? {
        var st = stat()
        guard lstat(path, &st) == 0, (st.st_mode & S_IFMT) == S_IFDIR else { return nil }
        return UInt64(st.st_ino)
    }
}
