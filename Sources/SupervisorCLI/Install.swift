import ArgumentParser
import Logging
import Bundles
import LinuxSupport
import Protocol
import SupervisorClient
import SupervisorKit
#if canImport(Glibc)
import Glibc
#endif

struct Install: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "install",
        abstract: "Install or upgrade a plugin from an archive (path or URL); a running supervisor swaps it in.",
        discussion: """
            The archive's Ed25519 signature is read from <archive>.sig and checked against the trusted keys of the \
            config. With no supervisor running, the plugin is installed into the home's plugins folder and starts with \
            the next `supervisor start`.
            """)

    @OptionGroup var options: ClientOptions

    @Argument(help: "A .tar.gz, .tar.xz, .tar.zst or .zip archive: a path or an http(s)/file URL.")
    var archive: String

    @Flag(help: "Allow a downgrade (the same version installs again without it).")
    var force = false

    @Flag(help: "Allow an archive with no signature (development only).")
    var allowUnsigned = false

    @Option(help: "Config file (trusted keys) for an install with no supervisor running.")
    var config: String?

    func validate() throws {
        if archive.isEmpty { throw badUsage("<archive> is empty: give a path or an http(s)/file URL") }
        if !archive.contains("://"), FileSystem.isDirectory(archive) {
            throw badUsage("\(archive.printable) is a folder: install takes an archive of a bundle (.tar.gz, .tar.xz, .tar.zst or .zip); put a bundle folder in a plugin folder (--plugins) instead, or archive it (docs/install.md)")
        }
    }

    func run() throws {
        let display = ProgressDisplay()
        let source = archive.contains("://") ? archive : (FileSystem.realPath(archive) ?? archive)
        // No supervisor listening: install offline into the home.
        if case .failure(let failure) = Result(catching: { () throws(SupervisorConnection.Failure) in try SupervisorConnection(socketPath: options.socketPath) }),
           failure.isUnreachable {
            return try offline(source)
        }
        try options.run(.install, { b in
            b.string("uri", source)
            b.raw("params", Array(#"{"force":\#(force),"allowUnsigned":\#(allowUnsigned)}"#.utf8))
        }, print: { raw in
            display.finish()
            return String(decoding: raw, as: UTF8.self)
        }, progress: { display.show($0) })
    }

    func offline(_ source: String) throws {
        var settings = SupervisorConfig(home: options.location.home)
        if let config { try settings.apply(configFile: config) }
        StandardError.write("no supervisor is running; installing into \(settings.home)/plugins\n")
        // Hold the home's lock, so a supervisor starting meanwhile does not see half an install.
        try FileSystem.makeDirectories(settings.home)
        let lock: HomeLock
        do { lock = try HomeLock(home: settings.home, holder: .install) } catch {
            if case .held(_, let pid, .install) = error {
                StandardError.write("install failed: another offline install (pid \(pid)) is installing into \(settings.home); try again once it is done\n")
            } else {
                StandardError.write("install failed: a supervisor holds \(settings.home) but its control socket does not answer (\(error))\n")
            }
            throw ExitCode(1)
        }
        defer { withExtendedLifetime(lock) {} }
        let display = ProgressDisplay()
        do {
            let store = BundleStore(home: settings.home)
            // An update a supervisor left unfinished is dropped, its previous version back in place:
            // what is installed now is the operator's choice, not to be updated over at the next start.
            for dropped in store.cleanLeftovers() {
                store.finish(dropped)
                StandardError.write("install: the update of \(dropped.identifier) to \(dropped.version) that a supervisor left unfinished is dropped; \(dropped.identifier) \(dropped.previous ?? "") is back in place\n")
            }
            var request = InstallRequest(operation: .stage, home: settings.home, lowSpeedSeconds: settings.downloadLowSpeedSeconds,
                                         maxBytes: settings.downloadMaxBytes)
            request.source = source
            request.force = force
            request.allowUnsigned = allowUnsigned
            request.trustedKeys = settings.trustedKeys
            request.keyExpiries = settings.keyExpiries
            request.revokedKeys = settings.revokedKeys
            request.sandbox = settings.sandboxEnabled
            request.workerExecutable = settings.workerExecutable
            request.runtimePaths = RuntimeFolders.current()
            let line = try InstallerProcess(executable: settings.installerExecutable).run(
                request, progress: { display.show(.init(stage: $0.stage, done: $0.done, total: $0.total)) })
            guard let staged = line.staged else {
                throw line.error.map(InstallError.init(body:)) ?? InstallError(.internalError, "the installer gave no answer")
            }
            try store.swapIn(staged)
            store.finish(staged)
            display.finish()
            print(#"{"installed":"\#(staged.identifier) \#(staged.version)"}"#)
        } catch {
            display.finish()
            StandardError.write("install failed: \(error)\n")
            throw ExitCode(1)
        }
    }
}

struct Update: ParsableCommand {
    static let configuration = CommandConfiguration(commandName: "update", abstract: "Install the catalog's newer versions of installed plugins into the running supervisor.")

    @OptionGroup var options: ClientOptions

    @Flag(help: "Only list the updates available.")
    var check = false

    func run() throws {
        let display = ProgressDisplay()
        var failures = FailedEntries()
        try options.run(.update, { b in
            b.raw("params", Array(#"{"check":\#(check)}"#.utf8))
        }, print: { raw in
            display.finish()
            return failures.read(raw)
        }, progress: { display.show($0) })
        try failures.exitIfAny()
    }
}

struct Uninstall: PluginRequestCommand {
    static let configuration = CommandConfiguration(commandName: "uninstall", abstract: "Stop a plugin and remove it from the home's plugins folder.")
    static let request = MessageKind.uninstall

    @OptionGroup var options: ClientOptions
    @OptionGroup var plugin: PluginArgument
}
