// The worker: one sandboxed process per plugin. Started by the supervisor with the protocol socket
// on descriptor 3 and a JSON WorkerSpec in $SP_WORKER_SPEC, either as the `plugin-worker` executable
// or forked by the fork server (`plugin-forkserver`, Sources/ForkServer), which calls
// `sp_worker_main` in the child; confines itself, loads the plugin, says hello, then relays frames
// between the socket and the plugin until the supervisor closes the socket.
import CLinuxSupport
import CPluginABI
import IPC
import LinuxSupport
import PluginProtocol
#if canImport(Glibc)
import Glibc
#endif

/// Tells the supervisor why this worker is ending itself, then exits.
/// On stderr only when the notice could not be sent: the supervisor logs the reason once, from the
/// notice (a second copy from stderr would make every load failure two lines).
func fail(_ error: WorkerError, connection: BlockingConnection?) -> Never {
    var told = false
    if let connection, let frame = try? ProtocolJSON.frame(ExitNotice(reason: error.code, message: error.message)) {
        told = (try? connection.sendFrame(frame)) != nil
    }
    if !told {
        let line = "plugin-worker: \(error.message)\n"
        _ = line.withCString { write(2, $0, strlen($0)) }
    }
    exit(error.exitCode)
}

/// The spec comes in the environment (not argv: other processes can read /proc/<pid>/cmdline, while
/// /proc/<pid>/environ needs ptrace access) and is removed from it before the plugin runs.
func readSpec() throws(WorkerError) -> WorkerSpec {
    guard let raw = getenv(WorkerSpec.environmentVariable) else {
        throw WorkerError(code: .badSpec, message: "\(WorkerSpec.environmentVariable) is not set; this program is started by the supervisor")
    }
    let text = Array(UnsafeRawBufferPointer(start: raw, count: strlen(raw)))
    unsetenv(WorkerSpec.environmentVariable)
    // Read by hand: Foundation's JSONDecoder would cost its first use in this fresh process (WorkerSpecReading.swift).
    do {
        return try WorkerSpec(reading: text)
    } catch {
        throw WorkerError(code: .badSpec, message: "invalid \(WorkerSpec.environmentVariable): \(error)")
    }
}

/// The worker's entry point, for the `plugin-worker` executable and for the fork server's children
/// (a C caller: the symbol is looked up with dlsym). Never returns: the worker ends with exit().
@_cdecl("sp_worker_main")
public func workerMain() -> Int32 {
    let startedAt = ProcessControl.monotonicMicroseconds()
    LifecycleSignals.block()

    let spec: WorkerSpec
    do { spec = try readSpec() } catch { fail(error, connection: nil) }
    // The private temporary folder, where libraries look for one (libc's tmpfile, SQLite, Python).
    if let temp = spec.tempDirectory {
        setenv("TMPDIR", temp, 1)
        setenv("SQLITE_TMPDIR", temp, 1)
    }
    let specReadAt = ProcessControl.monotonicMicroseconds()

    let connection = BlockingConnection(fd: spec.socketFD, maxBody: spec.maxFrameBytes)
    // The I/O loop below polls a moment before it sleeps: a call that follows the last one closely
    // is read at once instead of waking a halted CPU (SpinWindow).
    if let spin = spec.spinMicroseconds, spin > 0 { connection.pollBeforeSleeping(microseconds: spin) }
    var timings: [String: Int] = ["startedAtUs": Int(startedAt)]

    // SPEC §15's watermark page, given at the spawn: mapped before the sandbox closes its descriptor.
    let taken = spec.takenPageFD.flatMap(TakenPage.init(adopting:))

    let confinement: Sandbox.Applied
    var plan = SandboxPlan(spec)
    plan.takenPageFD = taken?.descriptor
    do { confinement = try Sandbox.apply(plan, sendLock: connection.sendLock) } catch { fail(error, connection: connection) }
    let sandboxedAt = ProcessControl.monotonicMicroseconds()
    timings["sandboxUs"] = Int(sandboxedAt - startedAt)
    timings.merge(confinement.timings) { a, _ in a }
    timings["sandbox.specUs"] = Int(specReadAt - startedAt)

    // The descriptor channel stays open for peer links when the supervisor offers them (PeerLinks/).
    let channel = confinement.keptDescriptorChannel ? spec.descriptorChannelFD : nil
    let links = spec.peerLinks == true ? channel.flatMap { PeerLinks(channel: $0, connection: connection, identifier: spec.identifier, maxBody: spec.maxFrameBytes,
                                                                     maxDepth: spec.maxJSONDepth ?? Frame.defaultMaxDepth, marks: taken) } : nil
    // The memfds of bytes attached to messages, both ways (docs/protocol.md "Bytes"); not inherited
    // by anything the plugin might start.
    let payloadChannel = spec.payloadChannelFD
    if let payloadChannel { _ = fcntl(payloadChannel, F_SETFD, FD_CLOEXEC) }
    let host = WorkerHost(connection: connection, maxBody: spec.maxFrameBytes, links: links, payloadChannel: payloadChannel,
                          maxPayloadBytes: spec.maxPayloadBytes)
    // Before a standby's wait (none of this is plugin code, and the restart's path is then the
    // plugin's load alone), so that a SIGTERM to a standby at its gate ends it at once: with no
    // plugin loaded there is no one to hear willTerminate (SignalRelay).
    SignalRelay.start(host: host)

    // Before any plugin code runs (its constructors): a stray profiling tick must not end it.
    Sandbox.ignoreProfilingSignal()

    // A standby (WorkerSpec.standby): sandboxed, it waits here, before anything of the plugin runs,
    // for the supervisor's word that the worker it may replace has ended and is to be restarted.
    var loadFrom = sandboxedAt
    if spec.standby == true {
        let order: [UInt8]?
        do { order = try connection.receiveFrame() } catch { exit(0) }
        // End of stream: not needed (the plugin is not restarted, or the supervisor is gone).
        guard let order else { exit(0) }
        guard order == Frame.loadBody else {
            fail(WorkerError(code: .badSpec, message: "a standby worker expected {\"type\":\"load\"}, got \(order.count) other bytes"), connection: connection)
        }
        loadFrom = ProcessControl.monotonicMicroseconds()
        timings["standbyUs"] = Int(loadFrom - sandboxedAt)
    }

    let plugin: UnsafePointer<sp_plugin>
    do {
        plugin = try PluginLoader.load(library: spec.library, host: host.host) { timings["dlopenUs"] = Int($0 - loadFrom) }
    } catch { fail(error, connection: connection) }
    host.attach(plugin)
    timings["loadUs"] = Int(ProcessControl.monotonicMicroseconds() - loadFrom)

    let hello = HelloMessage(abi: UInt32(SP_ABI_VERSION), pid: getpid(), plugin: spec.identifier, version: spec.version,
                             sandbox: confinement.report.layers, sandboxMissing: confinement.report.missing, timings: timings,
                             takenPage: taken != nil ? true : nil, linkMarks: taken != nil && links != nil ? true : nil,
                             takenPageKept: taken != nil && payloadChannel != nil ? true : nil,
                             idempotent: host.takeIdempotentDeclarations())
    do { try connection.sendFrame(hello.frame()) } catch { exit(0) }
    links?.start(host: host)

    // The I/O loop: ping is answered here, so a plugin that blocks its receive stops answering pings.
    // What this thread writes while it delivers the frames of one read (sync handlers' replies,
    // pongs) goes out in one write before it reads again (BlockingConnection).
    connection.holdWritesWhileDelivering()
    // Answered calls are not lost to a plugin that calls exit() (or crashes: the fatal-signal
    // reporter sends them too) while their replies are held.
    connection.sendsHeldAtExit()
    // Whether the supervisor asked this worker to end (`willTerminate`): an end of the socket
    // before that is no stop of the supervisor's.
    var askedToEnd = false
    let willTerminate = Array(#""willTerminate""#.utf8)
    do {
        while try connection.receive({ body -> Bool in
            // (Parsed only when the bytes are there: a call's frame is not read twice.)
            if !askedToEnd, body.count < 256, willTerminate.withUnsafeBytes({ cls_find(body.baseAddress, body.count, $0.baseAddress, $0.count) }) != nil,
               let env = try? Envelope.parse(body), env.kind == .event, Envelope.string(body, env.name) == EventName.willTerminate.rawValue {
                askedToEnd = true
            }
            // The supervisor's own short questions (the longest, `takenPage` with a 20-digit id, is
            // 46 bytes): a ping, and, from one that took this worker over in an upgrade in place,
            // its taken page.
            if body.count < 48, let env = try? Envelope.parse(body), env.kind == .ping || env.kind == .takenPage {
                if env.kind == .takenPage {
                    host.sendTakenPage(taken?.descriptor, answering: env.id ?? 0)
                } else {
                    var pong = FrameBuilder(kind: .pong)
                    pong.uint("id", env.id ?? 0)
                    try? connection.sendFrame(pong.finish())
                }
                return true
            }
            // The supervisor taking a peer link back (PeerLinks.swift): the worker's, not the plugin's.
            if let links, UnlinkMessage.starts(body) {
                links.unlink(body)
                return true
            }
            // The mark is stored once the plugin's lock is held, just before `receive` (the links
            // thread may be inside the plugin meanwhile: this request is not started until then).
            host.deliverFromSupervisor(body) { taken?.handingOver(body) }
            return true
        }) != nil {}
    } catch where !askedToEnd {
        let line = "plugin-worker[\(spec.identifier)]: protocol socket failed: \(error)\n"
        _ = line.withCString { write(2, $0, strlen($0)) }
    } catch {
        // After `willTerminate` the supervisor closed its end: unread frames the plugin sent
        // since (a log from its own thread) make that a reset rather than an end of stream.
    }
    if !askedToEnd {
        let line = "plugin-worker[\(spec.identifier)]: the protocol socket ended before the supervisor asked this worker to end (did the plugin close or replace descriptor \(connection.fd)?)\n"
        _ = line.withCString { write(2, $0, strlen($0)) }
    }
    // The supervisor closed the socket after `willTerminate` (a stop, or it died): destroy the
    // plugin and exit. What `destroy` sends is not held (it could only fail, but it must not wait
    // for a read). A socket that failed or ended before that is no clean end: the exit code says
    // `disconnected`, and the plugin's restart policy applies.
    connection.stopHolding()
    host.destroy()
    exit(askedToEnd ? 0 : ExitReason.disconnected.workerExitCode ?? 74)
}
