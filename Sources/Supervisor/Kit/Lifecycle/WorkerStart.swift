import Bundles
import LinuxSupport
import Logging
import NIOCore

/// The fork server (docs/sandbox.md, "Starting workers"): started with the supervisor, restarted
/// when it dies, dropped for exec when it cannot be had. Owned by the event loop like the rest of
/// Lifecycle; its exit comes from the child watcher through `loop.execute`.
extension Lifecycle {
    /// At most this many unasked ends of the fork server in `forkServerEndWindow`, then exec.
    static let forkServerEndLimit = 3
    static let forkServerEndWindow = TimeAmount.seconds(60)

    /// Starts the fork server when the configuration asks for one. Blocks the loop while it loads the
    /// worker's code (tens of milliseconds): at start, before any worker, and after it died.
    func startForkServer() {
        loop.preconditionInEventLoop()
        guard config.workerStart == .forkServer, forkServer == nil, !isShuttingDown else { return }
        let server: ForkServer
        do {
            server = try ForkServer.start(executable: config.forkServerExecutable, library: config.workerLibrary)
        } catch {
            workerStartProblem = "the fork server could not start: \(error); workers are exec'd"
            logger.warning("\(workerStartProblem!)")
            return
        }
        do {
            try supervisor.watcher?.watch(server.process) { [supervisor] exit in
                supervisor.loop.execute { supervisor.lifecycle.forkServerEnded(server, exit) }
            }
        } catch {
            server.stop()
            _ = try? server.process.wait()
            workerStartProblem = "the fork server's end could not be watched: \(error); workers are exec'd"
            logger.warning("\(workerStartProblem!)")
            return
        }
        forkServer = server
        workerStartProblem = nil
        logger.debug("fork server ready", metadata: ["pid": "\(server.pid)", "preloadMs": "\(Double(server.preloadMicroseconds) / 1000)"])
    }

    /// The fork server ended: at shutdown (its socket closed, or the supervisor killed it) that is
    /// all; otherwise another one starts, unless it keeps ending (then workers are exec'd).
    func forkServerEnded(_ server: ForkServer, _ exit: ChildExit) {
        if forkServer === server { forkServer = nil }
        guard !isShuttingDown, forkServer == nil, config.workerStart == .forkServer else { return }
        let now = NIODeadline.now()
        forkServerEnds = forkServerEnds.filter { now - $0 < Self.forkServerEndWindow } + [now]
        let how = exit.signaled ? "signal \(exit.signalName)" : "exit status \(exit.code)"
        if forkServerEnds.count >= Self.forkServerEndLimit {
            workerStartProblem = "the fork server ended \(forkServerEnds.count) times within 60 s (last: pid \(exit.pid), \(how)); workers are exec'd"
            logger.error("\(workerStartProblem!)")
            return
        }
        logger.warning("the fork server (pid \(exit.pid)) ended (\(how)); starting another")
        startForkServer()
    }

    /// How workers start now: "fork-server" or "exec".
    var workerStartMode: String { forkServer == nil ? SupervisorConfig.WorkerStart.exec.rawValue : SupervisorConfig.WorkerStart.forkServer.rawValue }

    /// Spawns a worker by the fork server when there is one, else (or when the fork server fails
    /// it) by exec (`SpawnedChild.forked` says which).
    func spawnProcess(_ manifest: Manifest, environment: [String], notify: Bool) throws(SystemError) -> SpawnedChild {
        let isolated = config.sandboxEnabled
        if let server = forkServer {
            do {
                return try Spawner.spawn(executable: config.workerExecutable, extraEnvironment: environment,
                                         notifyChannel: notify, isolated: isolated, forkServer: server)
            } catch {
                if server.isBroken {
                    // It is ended and reaped by the watcher, which starts another.
                    logger.warning("the fork server failed (\(error)); \(manifest.identifier)'s worker is exec'd")
                    server.stop()
                    if forkServer === server { forkServer = nil }
                } else {
                    logger.warning("the fork server could not start \(manifest.identifier)'s worker (\(error)); it is exec'd")
                }
            }
        }
        return try Spawner.spawn(executable: config.workerExecutable, extraEnvironment: environment, notifyChannel: notify, isolated: isolated)
    }
}
