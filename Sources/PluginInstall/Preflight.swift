import Dispatch
import IPC
import PluginProtocol
import Bundles
import LinuxSupport
#if canImport(Glibc)
import Glibc
#endif

/// Loads a staged bundle in a sandboxed worker, as the supervisor would, and waits for its hello:
/// a new version that cannot even load never replaces the installed one.
public enum Preflight {
    /// Returns once the worker said hello, and has been killed and reaped; throws why it did not.
    /// `spawned` is told the worker's pid first.
    public static func run(manifest: Manifest, library: String, scratch: String, workerExecutable: String, runtimePaths: [String],
                    sandbox: Bool, timeoutMs: Int = 10_000, spawned: (pid_t) -> Void) throws {
        try FileSystem.makeDirectories(scratch + "/data")
        try FileSystem.makeDirectories(scratch + "/live")
        try FileSystem.makeDirectories(scratch + "/tmp")
        let spec = WorkerSpec(
            identifier: manifest.identifier, version: manifest.version.description, bundle: manifest.bundle, library: library,
            dataDirectory: scratch + "/data", liveDirectory: scratch + "/live", tempDirectory: scratch + "/tmp", supervisorPID: getpid(),
            sandbox: SandboxSpec(enabled: sandbox, memoryMB: manifest.limits.memoryMB, openFiles: manifest.limits.openFiles,
                                 permissions: manifest.permissions, runtimePaths: runtimePaths))
        let json = String(decoding: try ProtocolJSON.encode(spec), as: UTF8.self)
        let child = try Spawner.spawn(executable: workerExecutable, extraEnvironment: ["\(WorkerSpec.environmentVariable)=\(json)",
                                                                                     "TMPDIR=\(scratch)/tmp", "SQLITE_TMPDIR=\(scratch)/tmp"])
        let process = child.process
        spawned(process.pid)
        // Its output is not read here: closed at once, so a chatty plugin cannot block on a full pipe.
        close(child.stdout.release())
        close(child.stderr.release())
        let socket = child.socket.raw
        let connection = BlockingConnection(fd: child.socket.release())
        // It proved it loads (or failed): it need not run its destroy. Killed and reaped on every path.
        defer {
            connection.close()
            process.signal(SIGKILL)
            _ = try? process.wait()
        }
        // A plugin may log before it is created; the first other frame must be hello, and all of it
        // must arrive within the time limit.
        let deadline = DispatchTime.now().uptimeNanoseconds + UInt64(timeoutMs) * 1_000_000
        func nextFrame() throws -> [UInt8]? {
            let now = DispatchTime.now().uptimeNanoseconds
            var pfd = pollfd(fd: socket, events: Int16(POLLIN), revents: 0)
            guard now < deadline, poll(&pfd, 1, Int32((deadline - now) / 1_000_000) + 1) > 0 else {
                throw InstallError(.loadFailed, "the new version did not load within \(timeoutMs) ms")
            }
            return try? connection.receiveFrame()
        }
        var next = try nextFrame()
        while let frame = next, let log = try? ProtocolJSON.decode(LogMessage.self, from: frame), log.type == .log {
            next = try nextFrame()
        }
        guard let frame = next else {
            // How it ended, when it has (its socket closes a moment before its exit is seen).
            var how = ""
            if process.hasEnded(within: 1_000), let exit = try? process.reap(blocking: false) {
                how = exit.signaled ? " (\(LifecycleSignals.name(exit.code)))" : " (exit code \(exit.code))"
            }
            throw InstallError(.loadFailed, "the worker for \(manifest.identifier) \(manifest.version) ended before saying hello\(how): its library, or a constructor in it, failed as it loaded")
        }
        if let notice = try? ProtocolJSON.decode(ExitNotice.self, from: frame), notice.type == .exit {
            throw InstallError(.loadFailed, notice.message + (notice.syscall.map { " (\($0))" } ?? ""))
        }
        guard let hello = try? ProtocolJSON.decode(HelloMessage.self, from: frame), hello.plugin == manifest.identifier else {
            throw InstallError(.loadFailed, "the worker for the new version did not say hello")
        }
    }
}
