import Bundles
import LinuxSupport
import Logging
import NIOCore
import SupervisorCore

/// The fork server (docs/sandbox.md, "The fork server"): started with the supervisor, restarted
/// when it dies, dropped for exec when it cannot be had. Owned by the event loop like the rest of
/// Lifecycle; its exit comes from the child watcher through `loop.execute`.
extension Lifecycle {
    /// Launches the fork server when the configuration asks for one: at start, first of all (it
    /// loads the worker's code while the supervisor reads its home and plugin folders), and again
    /// when it died. Its answer is read when the first worker is spawned (`readyForkServer`).
    func startForkServer() {
        loop.preconditionInEventLoop()
        guard config.workerStart == .forkServer, !forkServer.isRunningOrComing, !isShuttingDown else { return }
        var launched: Result<ForkServerConnection, ForkServerError>?
        // Made by the spawner thread: its workers' parent is the thread that made it (CLONE_PARENT).
        shared.onSpawnerThread {
            // Sandboxed workers without `network` each get a network namespace: it makes two ahead.
            launched = Result { () throws(ForkServerError) in
                try ForkServerConnection.launch(executable: config.forkServerExecutable, library: config.workerLibrary,
                                                emptyNetworks: config.sandboxEnabled ? Self.emptyNetworksAhead : 0)
            }
        }
        let server: ForkServerConnection
        do {
            server = try launched!.get()
        } catch {
            forkServer.launchFailed("the fork server could not start: \(error); workers are exec'd")
            logger.warning("\(forkServer.problem ?? "")")
            return
        }
        do {
            let back = handOff(self)
            try shared.watcher?.watch(server.process) { exit in
                back.execute { $0.forkServerEnded(server, exit) }
            }
        } catch {
            server.stop()
            _ = try? server.process.wait()
            forkServer.launchFailed("the fork server's end could not be watched: \(error); workers are exec'd")
            logger.warning("\(forkServer.problem ?? "")")
            return
        }
        forkServer.launched(server)
    }

    /// The fork server, ready: a launched one's answer is awaited here (a few milliseconds after its
    /// launch at most; usually it is already there). Nil when there is none or it cannot serve (it
    /// is ended then, and `status` says why workers are exec'd).
    func readyForkServer() -> ForkServerConnection? {
        if let server = forkServer.ready { return server }
        guard let server = forkServer.launching else { return nil }
        do {
            let waitStarted = NIODeadline.now()
            let preloadUs = try server.awaitReady(timeoutMs: Self.forkServerReadyTimeoutMs)
            forkServer.answered(server)
            let waitedUs = (NIODeadline.now() - waitStarted).nanoseconds / 1000
            logger.debug("fork server ready", metadata: ["pid": "\(server.pid)", "preloadMs": "\(Double(preloadUs) / 1000)",
                                                         "waitedMs": "\(Double(waitedUs) / 1000)"])
            return server
        } catch {
            // It has been ended: its exit is not one more death to start another after.
            forkServer.refused(server, "the fork server could not start: \(error); workers are exec'd")
            logger.warning("\(forkServer.problem ?? "")")
            return nil
        }
    }

    /// Empty network namespaces the fork server keeps made (docs/sandbox.md, "The fork server"):
    /// enough for a crash's restart and one more, not so many that idle ones cost kernel memory.
    static let emptyNetworksAhead = 2

    /// How long the first spawn waits for a launched fork server to load the worker's code (it takes
    /// about 5 ms in a release build, 30 ms in a debug build).
    static let forkServerReadyTimeoutMs: Int32 = 5_000

    /// The fork server ended: at shutdown (its socket closed, or the supervisor killed it) that is
    /// all; otherwise another one starts, unless it keeps ending (then workers are exec'd).
    func forkServerEnded(_ server: ForkServerConnection, _ exit: ChildExit) {
        let how = exit.signaled ? "signal \(exit.signalName)" : "exit status \(exit.code)"
        switch forkServer.ended(server, pid: exit.pid, how: how, now: .now, shuttingDown: isShuttingDown) {
        case .nothing: break
        case .gaveUp(let reason): logger.error("\(reason)")
        case .startAnother:
            logger.warning("the fork server (pid \(exit.pid)) ended (\(how)); starting another")
            startForkServer()
        }
    }

    /// Spawns a worker by the fork server when there is one, else (or when the fork server fails
    /// it) by exec (`SpawnedChild.forked` says which). `problem` is set to why a worker was exec'd
    /// although the fork server was asked for; the worker keeps it for `status`
    /// (`workerStartProblem`), as it was at its spawn.
    func spawnProcess(_ manifest: Manifest, environment: [String], descriptorChannel: Bool, takenPage: Int32, problem: inout String?) throws(SystemError) -> SpawnedChild {
        let isolated = config.sandboxEnabled
        // A worker that is to have a network namespace of its own may start in one made ahead.
        let emptyNetwork = isolated && !manifest.permissions.contains(.network)
        problem = nil
        if let server = readyForkServer() {
            do {
                return try Spawner.spawn(executable: config.workerExecutable, extraEnvironment: environment,
                                         descriptorChannel: descriptorChannel, payloadChannel: true, takenPage: takenPage, isolated: isolated, emptyNetwork: emptyNetwork,
                                         forkServer: server)
            } catch {
                // The fork server's own words, when it said any, are the whole reason (its
                // error's context already names the server and the system's error).
                let why = error.context.isEmpty ? "\(error)" : error.context
                if server.isBroken {
                    // It is ended and reaped by the watcher, which starts another.
                    problem = "the fork server failed (\(why)); this worker was exec'd"
                    server.stop()
                    forkServer.broke(server)
                } else {
                    problem = "the fork server could not start this worker (\(why)); it was exec'd"
                }
                logger.warning("\(manifest.identifier): \(problem!)")
            }
        } else if config.workerStart == .forkServer {
            // Given up or failed to launch (`forkServer.problem`), or ended and not yet started again.
            problem = forkServer.problem ?? "no fork server was ready (the last one ended and another is starting); this worker was exec'd"
        }
        var made: SpawnedChild? = nil
        var failure: SystemError?
        // The program itself as the worker's binary is told its role (removed before the worker runs).
        let execEnvironment = config.workersRunProgram ? environment + [SupervisorConfig.workerRoleVariable] : environment
        shared.onSpawnerThread {
            do throws(SystemError) {
                made = try Spawner.spawn(executable: config.workerExecutable, extraEnvironment: execEnvironment, descriptorChannel: descriptorChannel,
                                         payloadChannel: true, takenPage: takenPage, isolated: isolated)
            } catch {
                failure = error
            }
        }
        if let failure { throw failure }
        return made.take()!
    }
}
