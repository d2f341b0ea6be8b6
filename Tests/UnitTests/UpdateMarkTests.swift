import Bundles
import Foundation
import LinuxSupport
import Testing

/// An update's mark on disk (BundleStore+Updates.swift) at each point a supervisor can end: which
/// version is back in place at the next start, and what is applied again. Files only, no process.
struct UpdateMarkTests {
    /// A home with `u.app` installed (a folder holding `version`: "old") and an update of it staged
    /// (a folder holding "new"), as the installer leaves them.
    struct Home {
        let root: String
        let store: BundleStore
        let staged: BundleStore.Staged

        init(version: String = "2.0.0", previous: String = "1.0.0") throws {
            root = NSTemporaryDirectory() + "update-mark-" + UUID().uuidString
            let target = root + "/plugins/u.app"
            let folder = root + "/staging/u.app-" + UUID().uuidString.prefix(6)
            for (dir, text, v) in [(target, "old", previous), (folder + "/unpacked/u.app", "new", version)] {
                try FileManager.default.createDirectory(atPath: dir, withIntermediateDirectories: true)
                try text.write(toFile: dir + "/version", atomically: true, encoding: .utf8)
                try #"{"identifier":"u.app","version":"\#(v)","library":"libu.so"}"#.write(toFile: dir + "/plugin.json", atomically: true, encoding: .utf8)
                try "".write(toFile: dir + "/libu.so", atomically: true, encoding: .utf8)
            }
            store = BundleStore(home: root)
            staged = BundleStore.Staged(identifier: "u.app", version: version, previous: previous, folder: folder,
                                        bundle: folder + "/unpacked/u.app", target: target)
        }

        /// What `<home>/plugins/u.app` holds now.
        var installed: String { (try? String(contentsOfFile: root + "/plugins/u.app/version", encoding: .utf8)) ?? "(none)" }
        var stagingFolders: [String] { (try? FileManager.default.contentsOfDirectory(atPath: root + "/staging")) ?? [] }

        /// What a start finds, and what it would apply again: the staged bundle's contents.
        func restart(resuming: Bool = true) throws -> [String] {
            try BundleStore(home: root).cleanLeftovers(resuming: resuming).map { staged in
                #expect(staged.target == root + "/plugins/u.app")
                return try String(contentsOfFile: staged.bundle + "/version", encoding: .utf8)
            }
        }
    }

    @Test("marked, then the supervisor ends before the swap: the previous version stays, the update is applied again")
    func beforeTheSwap() throws {
        let home = try Home()
        try home.store.markUpdate(home.staged)
        #expect(try home.restart() == ["new"])
        #expect(home.installed == "old")
    }

    @Test("swapped in, then the supervisor ends (starting, or within the grace period): the previous version goes back in place, the update is applied again")
    func afterTheSwap() throws {
        let home = try Home()
        try home.store.markUpdate(home.staged)
        try home.store.swapIn(home.staged)
        #expect(home.installed == "new")
        #expect(try home.restart() == ["new"])
        #expect(home.installed == "old")
        // A second start before the update is applied again finds the same.
        #expect(try home.restart() == ["new"])
        #expect(home.installed == "old")
    }

    @Test("the same version installed again: told apart by the folders, not by their versions")
    func theSameVersionAgain() throws {
        let home = try Home(version: "1.0.0", previous: "1.0.0")
        try home.store.markUpdate(home.staged)
        try home.store.swapIn(home.staged)
        #expect(try home.restart() == ["new"])
        #expect(home.installed == "old")
    }

    @Test("finished (the new version proved itself) or rolled back: nothing is applied again, and the folder goes")
    func endedUpdates() throws {
        let finished = try Home()
        try finished.store.markUpdate(finished.staged)
        try finished.store.swapIn(finished.staged)
        finished.store.finish(finished.staged)
        #expect(try finished.restart().isEmpty)
        #expect(finished.installed == "new" && finished.stagingFolders.isEmpty)

        let rolledBack = try Home()
        try rolledBack.store.markUpdate(rolledBack.staged)
        try rolledBack.store.swapIn(rolledBack.staged)
        try rolledBack.store.rollBack(rolledBack.staged)
        #expect(try rolledBack.restart().isEmpty)
        #expect(rolledBack.installed == "old" && rolledBack.stagingFolders.isEmpty)
    }

    @Test("the previous version damaged since (its manifest unreadable, or its library gone): it does not go back; the new one stays, runnable")
    func aDamagedPreviousStaysOut() throws {
        for damage in ["plugin.json", "libu.so"] {
            let home = try Home()
            try home.store.markUpdate(home.staged)
            try home.store.swapIn(home.staged)
            if damage == "plugin.json" {
                try #"{"identifier":"#.write(toFile: home.staged.bundle + "/plugin.json", atomically: true, encoding: .utf8)
            } else {
                try FileManager.default.removeItem(atPath: home.staged.bundle + "/libu.so")
            }
            #expect(try home.restart().isEmpty, "\(damage)")
            #expect(home.installed == "new" && home.stagingFolders.isEmpty, "\(damage)")
        }
    }

    @Test("a mark that is not one (truncated, not JSON, too large, a bundle outside its folder, an identifier that is not one): a leftover, deleted; what is installed stays")
    func hostileMarks() throws {
        let valid = try Home()
        try valid.store.markUpdate(valid.staged)
        let mark = try String(contentsOfFile: valid.staged.folder + "/update.json", encoding: .utf8)
        func changed(_ key: String, _ value: String) throws -> String {
            var fields = try #require(try JSONSerialization.jsonObject(with: Data(mark.utf8)) as? [String: Any])
            fields[key] = value
            return String(decoding: try JSONSerialization.data(withJSONObject: fields), as: UTF8.self)
        }
        for text in [String(mark.prefix(mark.count / 2)), "not json", String(repeating: " ", count: 70_000) + mark,
                     try changed("bundleName", "../../plugins/u.app"), try changed("identifier", "..")] {
            let home = try Home()
            try home.store.swapIn(home.staged)
            try text.write(toFile: home.staged.folder + "/update.json", atomically: true, encoding: .utf8)
            #expect(try home.restart().isEmpty, "\(text.prefix(120))")
            #expect(home.installed == "new" && home.stagingFolders.isEmpty, "\(text.prefix(120))")
        }
    }

    @Test("the plugin replaced by another install since (its folder is not the one the mark names): the mark is a leftover, what is installed stays")
    func replacedSince() throws {
        let home = try Home()
        try home.store.markUpdate(home.staged)
        try home.store.swapIn(home.staged)
        let other = home.root + "/other"
        try FileManager.default.createDirectory(atPath: other, withIntermediateDirectories: true)
        try "other".write(toFile: other + "/version", atomically: true, encoding: .utf8)
        FileSystem.removeTree(home.root + "/plugins/u.app")
        try FileSystem.rename(other, to: home.root + "/plugins/u.app")
        #expect(try home.restart().isEmpty)
        #expect(home.installed == "other" && home.stagingFolders.isEmpty)
    }

    @Test("a binary taking over running workers (an upgrade) leaves a mark as it is, for a later start")
    func notResuming() throws {
        let home = try Home()
        try home.store.markUpdate(home.staged)
        try home.store.swapIn(home.staged)
        #expect(try home.restart(resuming: false).isEmpty)
        #expect(home.installed == "new" && home.stagingFolders.count == 1)
        #expect(try home.restart() == ["new"])
        #expect(home.installed == "old")
    }

    @Test("the home named another way at the next start (a trailing slash, a link to it): the mark is found all the same")
    func theHomeNamedAnotherWay() throws {
        let home = try Home()
        try home.store.markUpdate(home.staged)
        try home.store.swapIn(home.staged)
        let link = home.root + "-link"
        try FileManager.default.createSymbolicLink(atPath: link, withDestinationPath: home.root)
        let found = BundleStore(home: link + "/").cleanLeftovers()
        #expect(found.map(\.identifier) == ["u.app"])
        #expect(home.installed == "old")
    }
}
