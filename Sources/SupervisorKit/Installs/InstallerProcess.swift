import Bundles
import Dispatch
import Logging
import NIOCore
import LinuxSupport
import PluginProtocol
#if canImport(Glibc)
import Glibc
import SupervisorCore
#endif

/// Runs `supervisor-installer` for one request and reads its answer. Used by the supervisor (on its
/// install queue, never on the event loop) and by the CLI's offline install.
public struct InstallerProcess: Sendable {
    public let executable: String

    static let proxyVariables: Set<String> = ["http_proxy", "https_proxy", "no_proxy", "all_proxy",
                                              "HTTP_PROXY", "HTTPS_PROXY", "NO_PROXY", "ALL_PROXY"]

    public init(executable: String = FileSystem.executableDirectory() + "/supervisor-installer") {
        self.executable = executable
    }

    /// Blocks until the installer has answered and ended (it is reaped here). `progress`,
    /// `preflight` (the pid of each preflight worker it starts) and `confined` (the installer's own
    /// sandbox layers, and the missing ones with why) are called on this thread.
    public func run(_ request: InstallRequest, progress: (InstallerLine.Progress) -> Void = { _ in },
                    preflight: (pid_t) -> Void = { _ in },
                    confined: (_ layers: [String], _ missing: [String]) -> Void = { _, _ in }) throws(InstallError) -> InstallerLine {
        let json: String
        do { json = String(decoding: try ProtocolJSON.encode(request), as: UTF8.self) } catch {
            throw InstallError(.internalError, "cannot encode the installer request: \(error)")
        }
        // Downloads honour the operator's proxy settings; nothing else of the environment passes.
        let proxies = ProcessEnvironment.all.filter { Self.proxyVariables.contains($0.key) }.map { "\($0.key)=\($0.value)" }
        let child: SpawnedChild
        do {
            child = try Spawner.spawn(executable: executable, extraEnvironment: ["\(InstallRequest.environmentVariable)=\(json)"] + proxies)
        } catch {
            throw InstallError(.internalError, "cannot run \(executable): \(error)")
        }
        let process = child.process
        // Only stdout is read: the socket and stderr are closed now, so the installer can never
        // block writing to a pipe nobody reads.
        close(child.socket.release())
        close(child.stderr.release())
        let answer = readAnswer(child.stdout.raw, progress: progress, preflight: preflight, confined: confined)
        _ = try? process.wait()
        guard let answer else { throw InstallError(.internalError, "\(executable) ended without an answer") }
        return answer
    }

    /// Reads JSON lines until end of file: progress, preflight pids, then the one answer.
    private func readAnswer(_ fd: Int32, progress: (InstallerLine.Progress) -> Void, preflight: (pid_t) -> Void,
                            confined: ([String], [String]) -> Void) -> InstallerLine? {
        var buffer: [UInt8] = []
        var chunk = [UInt8](repeating: 0, count: 16 * 1024)
        var answer: InstallerLine?
        while true {
            let n = read(fd, &chunk, chunk.count)
            if n < 0 && errno == EINTR { continue }
            if n <= 0 { break }
            buffer += chunk[0..<n]
            while let newline = buffer.firstIndex(of: 0x0A) {
                let line = Array(buffer[..<newline])
                buffer.removeSubrange(...newline)
                guard let parsed = try? ProtocolJSON.decode(InstallerLine.self, from: line) else { continue }
                if let p = parsed.progress { progress(p) }
                if let pid = parsed.preflightPID { preflight(pid) }
                if let layers = parsed.sandbox { confined(layers, parsed.sandboxMissing ?? []) }
                if parsed.isAnswer { answer = parsed }
            }
        }
        return answer
    }
}

/// What the supervisor's install queue works with: values only, so nothing of the event loop's
/// state can be touched from the queue (`Installs.offLoop`). Runs one installer at a time.
struct InstallerRunner: Sendable {
    let queue = DispatchQueue(label: "supervisor.installs")
    let executable: String
    let logger: Logger
    /// Preflight workers of installs, refused on the control socket while they live.
    let preflightPIDs: Guarded<Set<pid_t>>
    /// Hears the installer's missing sandbox layers, on the loop.
    let shared: Handed<Shared>

    /// Runs the installer (on `queue`, never on the loop). Its preflight workers are refused on the
    /// control socket while they live.
    func runInstaller(_ request: InstallRequest, progress: (InstallerLine.Progress) -> Void = { _ in }) throws(InstallError) -> InstallerLine {
        dispatchPrecondition(condition: .onQueue(queue))
        var started: [pid_t] = []
        // The installer reaps its preflight workers: forget them when it is done (a pid is reused).
        defer { preflightPIDs.withLock { set in for pid in started { set.remove(pid) } } }
        return try InstallerProcess(executable: executable).run(request, progress: progress, preflight: { pid in
            started.append(pid)
            preflightPIDs.withLock { _ = $0.insert(pid) }
        }, confined: { layers, missing in
            // Said on the loop, once per distinct missing layer, like the workers' (docs/install.md).
            shared.execute { $0.noteMissingLayers(missing, who: "the installer") }
            logger.debug("installer confined: \(layers.joined(separator: " "))")
        })
    }

    /// Fetches the catalog through the installer (conditional GET, cached copy when the server fails).
    func loadCatalog(_ request: InstallRequest) throws(InstallError) -> CatalogLoaded {
        let line = try runInstaller(request)
        if let e = line.error { throw InstallError(body: e) }
        guard let catalog = line.catalog else { throw InstallError(.internalError, "the installer gave no catalog") }
        if let warning = catalog.warning { logger.warning("\(warning)") }
        return catalog
    }
}
