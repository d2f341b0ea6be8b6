import ArgumentParser
import Bundles
import LinuxSupport
import Protocol
import SupervisorClient

extension Scaffold.Language: ExpressibleByArgument {}

/// `supervisor new <identifier> [--lang swift|c] [--output DIR]`: a plugin bundle that builds with the
/// command it prints and runs under `supervisor start --plugins <its parent folder>`.
struct New: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "new",
        abstract: "Make a new plugin bundle (manifest, source with one method, build file, README).",
        discussion: "Prints the commands that build it, run it and call it. A Swift plugin depends on the plugin SDK package alone (SDK/ in this repository), a C plugin on its header.")

    @OptionGroup var plugin: PluginArgument

    @Option(name: .customLong("lang"), help: "swift or c.")
    var language: Scaffold.Language = .swift

    @Option(help: "The bundle folder to create (default: ./<identifier>). It must not exist, or be empty.")
    var output: String?

    @Option(help: "The plugin SDK package's folder (default: the SDK/ folder above this executable, or $SUPERVISOR_SDK).")
    var sdk: String?

    func run() throws {
        let folder = FileSystem.absolute(output ?? plugin.identifier)
        if FileSystem.exists(folder) {
            let entries = (try? FileSystem.list(folder)) ?? ["?"]
            guard FileSystem.isDirectory(folder), entries.isEmpty else {
                throw failure("\(folder) exists and is not an empty folder; give another --output", code: 64)
            }
        }
        let sdkFolder = try findSDK()
        let plan = Scaffold.plan(identifier: plugin.identifier, language: language, sdk: sdkFolder)
        do {
            for file in plan.files {
                let path = folder + "/" + file.path
                try FileSystem.makeDirectories(String(path[..<path.lastIndex(of: "/")!]), mode: 0o755)
                try FileSystem.writeAtomically(path, Array(file.text.utf8), mode: 0o644)
            }
        } catch {
            throw failure("cannot write the bundle in \(folder): \(error)", code: 1)
        }
        let parent = String(folder[..<folder.lastIndex(of: "/")!])
        print("""
            Made \(plugin.identifier) (\(language.rawValue)) in \(folder).
            Build it:  cd \(folder) && \(plan.build)
            Run it:    supervisor start --plugins \(parent.isEmpty ? "/" : parent)
            Call it:   supervisor call \(plugin.identifier) hello
            """)
    }

    /// What an SDK folder must hold for the language: the package for Swift, the header alone for C.
    private var sdkFiles: [String] {
        language == .c ? ["Sources/CPluginABI/include/sp_plugin.h"] : ["Package.swift", "Sources/CPluginABI/include/sp_plugin.h"]
    }

    /// An error of `new` itself, printed as `new`'s (ArgumentParser would print the root usage for
    /// a `ValidationError` thrown from `run`).
    private func failure(_ why: String, code: Int32) -> ExitCode {
        StandardError.write("supervisor new: \(why)\n")
        return ExitCode(code)
    }

    /// `--sdk`, `$SUPERVISOR_SDK`, or the SDK/ folder in a parent of this executable's folder (a
    /// build in a clone: <clone>/.build/<config>/supervisor).
    private func findSDK() throws -> String {
        func isSDK(_ path: String) -> Bool { sdkFiles.allSatisfy { FileSystem.exists(path + "/" + $0) } }
        let needs = sdkFiles.joined(separator: " and ")
        if let sdk {
            let path = FileSystem.absolute(sdk)
            guard isSDK(path) else { throw failure("--sdk \(sdk): no plugin SDK there (a \(language.rawValue) plugin needs \(needs))", code: 64) }
            return FileSystem.realPath(path) ?? path
        }
        if let env = ProcessEnvironment.all["SUPERVISOR_SDK"], !env.isEmpty {
            guard isSDK(env) else { throw failure("SUPERVISOR_SDK=\(env): no plugin SDK there (a \(language.rawValue) plugin needs \(needs))", code: 64) }
            return FileSystem.realPath(env) ?? env
        }
        var dir = FileSystem.realPath(FileSystem.executableDirectory()) ?? FileSystem.executableDirectory()
        while !dir.isEmpty {
            if isSDK(dir + "/SDK") { return dir + "/SDK" }
            guard let slash = dir.lastIndex(of: "/") else { break }
            dir = String(dir[..<slash])
        }
        throw failure("cannot find the plugin SDK (an SDK/ folder above \(FileSystem.executableDirectory())); give --sdk <clone>/SDK or set SUPERVISOR_SDK", code: 64)
    }
}
