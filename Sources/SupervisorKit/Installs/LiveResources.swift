#if canImport(Glibc)
import Glibc
#endif
#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif
import Bundles
import LinuxSupport
import Logging
import NIOCore
import PluginProtocol
import SupervisorCore

extension Installs {
    /// Validators of one live resource, kept beside it for the next conditional GET.
    private struct Validators: Codable {
        var etag: String?
        var lastModified: String?
        var checked: Double
    }

    /// Refreshes a plugin's live resources (conditional GET), never replacing a good file with a
    /// failed or partial download; each 200 is announced with `resourceUpdated`.
    func refreshResources(_ record: PluginRecord, force: Bool = false) {
        guard config.updatesEnabled, let resources = record.manifest.resources else { return }
        let id = record.identifier
        let live = config.home + "/live/" + id
        let base = request(.fetch)
        let back = handOff(self)
        offLoop { runner in
            let meta = live + "/.meta"
            try? FileSystem.makeDirectories(meta)
            for name in resources.files {
                Self.refresh(name, of: id, baseURL: resources.baseURL, into: live, meta: meta, daily: resources.daily, force: force,
                             base: base, runner: runner, announce: back)
            }
        }
    }

    /// One file (on the install queue).
    private static func refresh(_ name: String, of id: String, baseURL: String, into live: String, meta: String, daily: Bool, force: Bool,
                         base: InstallRequest, runner: InstallerRunner, announce: Handed<Installs>) {
        let logger = runner.logger
        let metaFile = meta + "/" + name.replacing("%", with: "%25").replacing("/", with: "%2F") + ".json"
        let previous = (try? FileSystem.readFile(metaFile, limit: 1 << 16)).flatMap { try? JSONDecoder().decode(Validators.self, from: Data($0)) }
        let destination = live + "/" + name
        let now = Date().timeIntervalSince1970
        if daily, !force, let previous, now - previous.checked < 86_400, FileSystem.exists(destination) { return }
        if let slash = destination.lastIndex(of: "/") { try? FileSystem.makeDirectories(String(destination[..<slash])) }
        let temp = destination + ".download"
        let known = FileSystem.exists(destination) ? previous : nil
        do throws(InstallError) {
            var request = base
            request.url = baseURL + "/" + name
            request.destination = temp
            request.etag = known?.etag
            request.lastModified = known?.lastModified
            let line = try runner.runInstaller(request)
            if let e = line.error { throw InstallError(body: e) }
            guard let fetched = line.fetched else { throw InstallError(.internalError, "the installer gave no answer") }
            if fetched.notModified {
                save(Validators(etag: known?.etag, lastModified: known?.lastModified, checked: now), to: metaFile)
                return
            }
            do { try FileSystem.rename(temp, to: destination) } catch { throw InstallError(.fileSystem, "cannot replace \(destination): \(error)") }
            save(Validators(etag: fetched.etag, lastModified: fetched.lastModified, checked: now), to: metaFile)
            announce.execute { installs in
                guard let record = installs.table[id], record.phase == .running else { return }
                installs.logger.info("resource \(name) refreshed", metadata: ["plugin": "\(id)"])
                installs.shared.sendEvent(record, .resourceUpdated, payload: { $0.object("payload", ["name": .string(name), "path": .string(destination)]) }) { _ in }
            }
        } catch {
            unlink(temp)
            logger.warning("resource \(name) not refreshed: \(error); the plugin keeps its current copy", metadata: ["plugin": "\(id)"])
        }
    }

    private static func save(_ validators: Validators, to file: String) {
        guard let bytes = try? JSONEncoder().encode(validators) else { return }
        try? bytes.write(to: URL(fileURLWithPath: file))
    }
}
