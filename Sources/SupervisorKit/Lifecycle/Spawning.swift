#if canImport(Glibc)
import Glibc
#endif
import Bundles
import CLinuxSupport
import Confinement
#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif
import LinuxSupport
import Logging
import NIOCore
import PluginProtocol
import Protocol
import SupervisorCore

extension Lifecycle {
    /// Spawns the worker that will serve `record` now (`spawn` paces activations first).
    func spawnNow(_ record: PluginRecord) {
        loop.preconditionInEventLoop()
        // One serving worker per plugin, and none once shutdown has begun.
        guard record.instance == nil, !isShuttingDown else { return }
        let spawned: SpawnedWorker
        switch spawnWorker(record.manifest, temp: freeTemporaryFolder(record)) {
        case .failure(let failure): return fail(record, reason: failure.reason)
        case .success(let s): spawned = s
        }
        record.library = spawned.library
        record.variant = spawned.variant
        record.instance = spawned.instance
        // An activation is announced here, with the pid of the worker that now exists (SPEC §16).
        let announced = record.life.workerSpawned()
        if !announced.isEmpty { effects.now(.life(record, announced)) }
        settleReloads()
    }

    /// A worker just spawned, and the library the host chose for it.
    struct SpawnedWorker {
        var instance: WorkerInstance
        var library: String
        var variant: String?
    }

    /// What to do when the worker's binary is not there (empty when it is): where it is looked
    /// for and what to set.
    var missingWorkerAdvice: String {
        guard !config.workersRunProgram, !FileSystem.exists(config.workerExecutable) else { return "" }
        return ". No plugin-worker is there. `supervisor start` runs the plugin-worker, plugin-forkserver and"
            + " libPluginWorkerCore.so beside its own executable: install or build them together (this project's"
            + " .build/release after `swift build -c release`). A program embedding PluginHost finds them where its"
            + " `Configuration.binaries` says, else beside the program, in $SUPERVISOR_BINARIES or beside the"
            + " `supervisor` on $PATH (docs/host.md, \"Binaries\")"
    }

    /// Why a worker could not be spawned.
    struct SpawnFailure: Error {
        var reason: String
    }

    /// Spawns a worker for `manifest` (with `temp` as its private temporary folder) and wires its
    /// socket, output, exit and seccomp channel into the event loop; or says why it could not.
    /// A `standby` waits, sandboxed, for `adoptStandby` before it loads its plugin, and has no
    /// start-up deadline until then (Standby.swift).
    func spawnWorker(_ manifest: Manifest, temp: String, standby: Bool = false) -> Result<SpawnedWorker, SpawnFailure> {
        let id = manifest.identifier
        let library: (path: String, variant: String?)
        do {
            library = try VariantSelector.choose(manifest, sandbox: config.sandboxEnabled)
        } catch {
            return .failure(SpawnFailure(reason: "\(error)"))
        }
        let data = config.home + "/data/" + id
        let live = config.home + "/live/" + id
        do {
            try FileSystem.makeDirectories(data)
            try FileSystem.makeDirectories(live)
            // A clean private temporary folder for each worker.
            FileSystem.removeTree(temp)
            try FileSystem.makeDirectories(temp)
        } catch {
            return .failure(SpawnFailure(reason: "cannot create the data folders of \(id) in \(config.home): \(error)"))
        }
        let notifier = shared.notifier
        var spec = workerSpec(manifest, library: library.path, data: data, live: live, temp: temp, descriptorChannel: notifier != nil)
        spec.peerLinks = config.peerLinks && notifier != nil ? true : nil
        spec.spinMicroseconds = config.workerSpinMicroseconds > 0 ? config.workerSpinMicroseconds : nil
        spec.standby = standby ? true : nil
        if spec.peerLinks == true, config.maxJSONDepth != Frame.defaultMaxDepth { spec.maxJSONDepth = config.maxJSONDepth }
        // A control group of its own, made and limited before it exists. On v1 (and without a
        // descriptor channel) the worker joins it itself, by moving its one thread (no global lock,
        // no grace period: CgroupGroup.tasksFiles); on v2 the supervisor's mover puts it there (off
        // the worker's path until the plugin loads) and says so on the descriptor channel.
        var cgroup: CgroupGroup?
        if let tree = shared.cgroups {
            do {
                // A name no group has: after an upgrade the count starts again, and the groups of
                // the workers the new binary adopted keep theirs.
                repeat {
                    spawnCount &+= 1
                    cgroup = try tree.makeGroup(Self.groupName(id, spawnCount), limits: cgroupLimits(manifest))
                } while cgroup == nil
                spec.cgroupFolders = cgroup?.limitFolders
                if notifier != nil && tree.version == .v2 {
                    spec.cgroupBySupervisor = true
                } else {
                    spec.cgroupProcs = cgroup?.procsFiles
                    spec.cgroupTasks = cgroup?.tasksFiles
                }
            } catch {
                logger.warning("no cgroup for \(id): \(error)", metadata: ["plugin": "\(id)"])
                spec.cgroupMissing = "could not make its group: \(error)"
            }
        } else if config.sandboxEnabled {
            spec.cgroupMissing = shared.cgroupsMissing
        }
        // Its taken page (SPEC §15), made here and handed over as descriptor 6: the worker sends
        // no descriptor for it. Without one (no memfd here) nothing it held is replayed.
        var page: UnsafePointer<UInt64>?
        let pageFD = cls_taken_page_create(&page)
        defer { if pageFD >= 0 { close(pageFD) } }
        if pageFD >= 0 { spec.takenPageFD = 6 }
        let specJSON: String
        do { specJSON = String(decoding: try ProtocolJSON.encode(spec), as: UTF8.self) } catch {
            if let page { cls_taken_page_unmap(page) }
            return .failure(SpawnFailure(reason: "cannot encode the worker spec: \(error)"))
        }
        var spawned: SpawnedChild
        var startProblem: String?
        do {
            // TMPDIR in the exec's environment, not only set by the worker: runtimes that read the
            // environment the process started with (Go's c-shared runtime) see it too.
            spawned = try spawnProcess(manifest, environment: ["\(WorkerSpec.environmentVariable)=\(specJSON)", "TMPDIR=\(temp)", "SQLITE_TMPDIR=\(temp)"],
                                       descriptorChannel: notifier != nil, takenPage: pageFD, problem: &startProblem)
        } catch {
            if let page { cls_taken_page_unmap(page) }
            cgroup?.remove()
            return .failure(SpawnFailure(reason: "cannot start a worker (\(config.workerExecutable)): \(error)\(missingWorkerAdvice)"))
        }
        let instance = WorkerInstance(process: spawned.process, manifest: manifest, temporaryFolder: temp, now: .now())
        instance.logWindow = RateWindow.logs(floodLimit: config.floodLogsPerSecond)
        instance.cgroup = cgroup
        instance.forked = spawned.forked
        instance.startProblem = startProblem
        instance.library = (library.path, FileStamp(path: library.path))
        if let page { instance.crash.give(page) }
        // The descriptors of the bytes attached to its messages, both ways (Routing/Payloads.swift).
        if let payloads = spawned.payloadChannel.take() { instance.payloadChannel = payloads.release() }
        // The watcher's and the notifier's threads reach the worker's record only on the loop.
        let back = handOff((lifecycle: self, instance: instance))
        do {
            try shared.watcher?.watch(instance.process) { exit in
                back.execute { $0.lifecycle.childExited($0.instance, exit) }
            }
        } catch {
            // A worker whose end could not be seen must not run: end and reap it now.
            instance.process.signal(SIGKILL)
            _ = try? instance.process.wait()
            cgroup?.remove()
            return .failure(SpawnFailure(reason: "cannot watch a worker's exit: \(error)"))
        }
        if let notifier, let channel = spawned.descriptorChannel.take() {
            // Its filter's channel is watched once it is in its group (moved, then told J or F).
            let raw = channel.release()
            // The same socket carries its peer links later (the notifier closes its own copy).
            if spec.peerLinks == true {
                let copy = fcntl(raw, F_DUPFD_CLOEXEC, 3)
                if copy >= 0 { instance.descriptorChannel = copy }
            }
            let process = instance.process
            let logger = logger
            let watchFilter: @Sendable () -> Void = {
                do {
                    try notifier.adopt(channel: OwnedDescriptor(raw), process: process) { call in
                        SandboxAnswers.answer(call, for: back)
                    }
                } catch {
                    // Its filter's calls would wait for an answer forever: it must not run.
                    back.execute { $0.lifecycle.kill($0.instance, .spawnError, "cannot answer for its seccomp filter: \(error)") }
                }
            }
            if spec.cgroupBySupervisor == true, let tree = shared.cgroups, let group = cgroup {
                tree.admit(instance.pid, to: group) { failure in
                    var byte: UInt8 = failure == nil ? UInt8(ascii: "J") : UInt8(ascii: "F")
                    _ = send(raw, &byte, 1, Int32(MSG_NOSIGNAL))
                    if let failure {
                        logger.warning("cannot move \(id) into its cgroup: \(failure)", metadata: ["plugin": "\(id)"])
                    }
                    watchFilter()
                }
            } else {
                watchFilter()
            }
        }
        table.workerSpawned(instance)
        logger.debug("spawned worker", metadata: ["plugin": "\(id)", "pid": "\(instance.pid)", "version": "\(manifest.version)"])
        effects.post(.connect(instance, socket: spawned.socket.release()))
        let out = OutputCapture.attach(spawned.stdout, stream: "stdout", plugin: id, shared: shared)
        let err = OutputCapture.attach(spawned.stderr, stream: "stderr", plugin: id, shared: shared)
        instance.outputFDs = (out, err)

        if !standby { armStartupDeadline(instance) }
        return .success(SpawnedWorker(instance: instance, library: library.path, variant: library.variant))
    }

    /// A worker must say hello in time (its `startup` has a timeout of its own). Weak: an instance
    /// that has ended must not live (with its pidfd) until the timeout passes.
    func armStartupDeadline(_ instance: WorkerInstance) {
        let startupTimeoutMs = startupTimeout(instance.manifest)
        instance.awaitStart(loop.assumeIsolated().scheduleTask(in: .milliseconds(Int64(startupTimeoutMs))) { [self, weak instance] in
            if let instance, instance.hello == nil, !instance.phase.stopRequested {
                kill(instance, .startupTimeout, "no hello within \(startupTimeoutMs) ms")
            }
        })
    }

    /// The seccomp filter (with a listener) for a worker that is pid 1 of its namespace, compiled once
    /// per distinct policy (with or without `network`) and handed to every worker, which would
    /// otherwise compile the same rules with libseccomp at each start. Nil if it cannot be compiled
    /// here: the worker compiles its own (and reports what fails).
    func seccompProgram(network: Bool) -> Data? {
        if let known = seccompPrograms[network] { return known }
        let program: Data?
        do throws(ConfinementError) {
            program = Data(try Seccomp.Filter.program(SeccompPolicy.rules(network: network, pid: 1, notify: true, owner: (getuid(), getgid()))))
        } catch {
            logger.warning("the seccomp filter could not be compiled in the supervisor (\(error.message)); each worker compiles its own")
            program = nil
        }
        seccompPrograms[network] = .some(program)
        return program
    }

    /// How long a worker of `m` may take to say hello and answer `startup` (a day in debug mode).
    func startupTimeout(_ m: Manifest) -> Int {
        config.isDebugged(m.identifier) ? SupervisorConfig.longestTimeoutMs : m.limits.startupTimeoutMs ?? config.startupTimeoutMs
    }

    /// What the worker needs to know: its plugin, its folders and its sandbox.
    func workerSpec(_ m: Manifest, library: String, data: String, live: String, temp: String, descriptorChannel: Bool) -> WorkerSpec {
        var spec = WorkerSpec(
            identifier: m.identifier, version: m.version.description, bundle: m.bundle, library: library,
            dataDirectory: data, liveDirectory: live, tempDirectory: temp, supervisorPID: getpid(), socketFD: 3,
            uid: getuid(), gid: getgid(), descriptorChannelFD: descriptorChannel ? 4 : nil, maxFrameBytes: config.maxFrameBytes,
            sandbox: SandboxSpec(enabled: config.sandboxEnabled, memoryMB: m.limits.memoryMB, openFiles: m.limits.openFiles,
                                 permissions: m.permissions, required: config.requiredSandboxLayers,
                                 runtimePaths: shared.runtimePaths, debuggable: config.isDebugged(m.identifier) ? true : nil,
                                 seccompProgram: descriptorChannel ? seccompProgram(network: m.permissions.contains(.network)) : nil))
        // How the worker tells an empty network namespace the fork server made ahead from the host's.
        if config.sandboxEnabled { spec.hostNetworkNamespace = shared.networkNamespace }
        // Every worker, sandboxed or not, has one (Routing/Payloads.swift).
        spec.payloadChannelFD = 5
        spec.maxPayloadBytes = min(config.maxPayloadMB, m.limits.maxPayloadMB ?? config.maxPayloadMB) << 20
        return spec
    }

    /// What its cgroup holds it to: the memory limits the sampler enforces too, at most
    /// `workerPidsMax` threads, and the manifest's `limits.cpuPercent`.
    func cgroupLimits(_ m: Manifest) -> CgroupLimits {
        let memory = MemoryLimits(m)
        return CgroupLimits(memoryMax: memory.hard, memoryHigh: memory.soft, pidsMax: Self.workerPidsMax, cpuPercent: m.limits.cpuPercent)
    }

    /// A worker's group's folder name: `<identifier>-<n>`, or for an identifier too long for that to
    /// be a file name (one folder name is at most 255 bytes, and the worker's own root makes one of
    /// that name too) its first 200 bytes, a hash of the whole and `-<n>`.
    static func groupName(_ identifier: String, _ count: Int) -> String {
        let utf8 = Array(identifier.utf8)
        guard utf8.count > 200 else { return "\(identifier)-\(count)" }
        // FNV-1a: stable across runs and binaries.
        let hash = utf8.reduce(UInt32(2_166_136_261)) { ($0 ^ UInt32($1)) &* 16_777_619 }
        return String(decoding: utf8.prefix(200), as: UTF8.self) + "~" + String(hash, radix: 16) + "-\(count)"
    }

    /// pids.max of a worker's group: threads (and, were they allowed, processes).
    static let workerPidsMax = 1024

    /// The plugin's private temporary folder: `<home>/tmp/<identifier>`, emptied when it stops.
    func temporaryFolder(_ identifier: String) -> String { config.home + "/tmp/" + identifier }

    /// A temporary folder for a new worker of `record`: the plugin's, unless one of its workers
    /// still has it (an update's two versions run side by side), then `<identifier>@<n>`.
    func freeTemporaryFolder(_ record: PluginRecord) -> String {
        let folder = temporaryFolder(record.identifier)
        guard record.workers.contains(where: { $0.temporaryFolder == folder }) else { return folder }
        folderSerial &+= 1
        return folder + "@\(folderSerial)"
    }

    /// Marks a plugin as failed without a worker (it could not be spawned at all).
    func fail(_ record: PluginRecord, reason: String) {
        effects.now(.life(record, record.life.spawnFailed(record.identifier, reason: reason)))
    }

    /// The worker said `hello`: it is sandboxed and its plugin loaded. It gets `startup` now, or once
    /// its dependencies are running.
    func helloReceived(_ instance: WorkerInstance, _ hello: HelloMessage) {
        guard let record = table[instance.identifier], let role = record.role(of: instance), role != .retiring else { return }
        // A standby loads its plugin only when told to, and says hello after that.
        guard role != .standby else { return protocolViolation(instance, "hello from a standby worker before it was told to load") }
        // Read after its reap (it said hello and died before the loop read that): only its exit
        // notice matters now.
        guard !instance.phase.hasExited else { return }
        // Told to stop before its hello was read (a shutdown during start-up): its stop goes on.
        guard !instance.phase.stopRequested else { return }
        guard instance.move(to: .loaded, logger: logger) else { return }
        instance.hello = HelloFacts(sandbox: hello.sandbox ?? [], sandboxMissing: hello.sandboxMissing ?? [], idempotent: hello.idempotent ?? [])
        // The worker's own, beside what the supervisor timed before (a standby's `loadOrderUs`).
        instance.timings.merge(hello.timings ?? [:]) { _, worker in worker }
        instance.timings["helloUs"] = Int((NIODeadline.now() - instance.spawnedAt).nanoseconds / 1000)
        if let started = hello.timings?["startedAtUs"] {
            // The worker's CLOCK_MONOTONIC at its main() against ours at spawn: the exec and load cost.
            instance.timings["spawnUs"] = max(0, started - Int(instance.spawnedAt.uptimeNanoseconds / 1000))
            instance.timings["startedAtUs"] = nil
        }
        shared.noteMissingLayers(instance.hello!.sandboxMissing, reporter: instance.identifier)
        if table.dependenciesRunning(instance.manifest) {
            sendStartup(record, instance)
        } else if role == .successor {
            // The new version's dependencies were running when the update began; one went down since.
            let down = instance.manifest.dependencies.map(\.identifier).filter { table[$0]?.phase != .running }
            kill(instance, .startupFailed, "its dependencies \(down.joined(separator: ", ")) are not running")
        } else if startStep(record) != nil {
            // A dependency failed (or stopped) before this hello: the pass at that failure saw this
            // worker unloaded and left it, so it fails by its dependency now. (Otherwise it waits,
            // loaded, for its dependencies to run.)
            startWaitingPlugins()
        }
    }

    /// `startup`, with what the plugin needs to know about itself.
    func sendStartup(_ record: PluginRecord, _ instance: WorkerInstance) {
        guard instance.move(to: .startingUp, logger: logger) else { return }
        let m = instance.manifest
        let dependencies = m.dependencies.map(\.identifier)
        let home = config.home
        let startupTimeoutMs = startupTimeout(m)
        shared.sendEvent(to: instance, .startup, timeoutMs: startupTimeoutMs, payload: { frame in
            frame.object("payload", [
                "identifier": .string(m.identifier), "version": .string(m.version.description),
                "dataDirectory": .string(home + "/data/" + m.identifier), "liveDirectory": .string(home + "/live/" + m.identifier),
                "bundleDirectory": .string(m.bundle), "dependencies": .strings(dependencies),
            ])
        }) { [self] result in
            // A worker being stopped meanwhile is left to its stop.
            guard let role = record.role(of: instance), instance.phase == .startingUp else { return }
            switch result {
            case .success:
                if role == .successor { takeOver(record) } else { becameRunning(record) }
            case .failure(let error) where error.code == ErrorCode.timeout.rawValue:
                kill(instance, .startupTimeout, "startup not answered within \(startupTimeoutMs) ms")
            case .failure(let error) where error.code == ExitReason.identifierMismatch.rawValue || error.code == ExitReason.dependencyMismatch.rawValue:
                // The SDK's check of the library against its manifest: no restart cures it.
                kill(instance, ExitReason(rawValue: error.code)!, error.message)
            case .failure(let error):
                kill(instance, .startupFailed, "startup failed: \(error)")
            }
        }
    }

    func becameRunning(_ record: PluginRecord) {
        guard let instance = record.instance, instance.move(to: .running, logger: logger) else { return }
        instance.startSettled()
        instance.timings["startupUs"] = Int((NIODeadline.now() - instance.spawnedAt).nanoseconds / 1000)
        effects.now(.life(record, record.life.workerRuns(record.identifier, version: record.manifest.version.description)))
    }
}
