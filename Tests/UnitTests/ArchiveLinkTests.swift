#if canImport(Glibc)
import Glibc
#endif
import Bundles
import PluginInstall
import Testing

/// Where an archive's symbolic links lead, followed through each other as the kernel would
/// (`ArchiveExtractor.linkLeaving`): worked out from the archive's entries, no file made.
@Suite struct ArchiveLinkTests {
    @Test func linksInsideTheBundleAreFine() {
        let links = ["p/lib.so": "lib.so.1", "p/d/up": "..", "p/d/again": "up/d", "p/lib/x": "../lib.so"]
        #expect(ArchiveExtractor.linkLeaving(["p"], links: links) == nil)
        // A link to a path that is not there inside is only dangling.
        #expect(ArchiveExtractor.linkLeaving(["p"], links: ["p/gone": "nothing/here"]) == nil)
    }

    @Test func aChainThroughAnotherLinkThatLeavesIsNamed() {
        let links = ["p/d/up": "..", "p/esc": "d/up/../"]
        #expect(ArchiveExtractor.linkLeaving(["p"], links: links)?.path == "p/esc")
        // Within the archive's root it stays: only the bundle's own folder is installed.
        #expect(ArchiveExtractor.linkLeaving([], links: links) == nil)
    }

    @Test func aLinkMadeLaterCanTakeAnEarlierOneOut() {
        #expect(ArchiveExtractor.linkLeaving(["p"], links: ["p/a": "b/x", "p/b": ".."])?.path == "p/a")
    }

    @Test func aSiblingFolderOrALoopIsRefused() {
        #expect(ArchiveExtractor.linkLeaving(["p"], links: ["p/other": "../h.other"])?.target == "../h.other")
        #expect(ArchiveExtractor.linkLeaving(["p"], links: ["p/a": "b/x", "p/b": "a/y"]) != nil)
        #expect(ArchiveExtractor.linkLeaving(["p"], links: ["p/abs": "x", "p/x": "/etc/passwd"]) != nil)
    }
}

/// What an unpacking that cannot make a file or folder says: the disk's fault is `fileSystem`,
/// naming the path, never `archiveRefused` (which tells the operator the archive is bad).
@Suite struct UnpackFailureTests {
    static func failure(_ code: Int32) -> InstallError {
        errno = code
        return ArchiveExtractor.notCreated("/h/staging/x/b/plugin.json", archive: "x.tar.gz") { InstallError(.archiveRefused, "archive x.tar.gz refused: \($0)") }
    }

    @Test(arguments: [ENOSPC, EDQUOT, EROFS, EIO, EMFILE, ENFILE, ENOMEM, EACCES, EPERM])
    func theDisksFaultIsAFileSystemError(_ code: Int32) {
        let error = Self.failure(code)
        #expect(error.code == .fileSystem, "\(error)")
        #expect(error.message == "cannot create /h/staging/x/b/plugin.json (unpacking x.tar.gz): \(String(cString: strerror(code)))")
    }

    @Test(arguments: [EEXIST, ENAMETOOLONG, ENOTDIR])
    func theArchivesFaultIsARefusal(_ code: Int32) {
        let error = Self.failure(code)
        #expect(error.code == .archiveRefused && error.message.contains("cannot create /h/staging/x/b/plugin.json: "), "\(error)")
    }
}
