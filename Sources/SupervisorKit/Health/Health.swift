import Bundles
import LinuxSupport
import Logging
import NIOCore
import PluginProtocol
import SupervisorCore

/// The supervisor's health timers: the watchdog's pings, memory limits, daily resource refreshes.
/// Each tick runs on the event loop; workers with nothing inside are checked only every
/// `idleCheckIntervalMs`; what it finds (a worker to kill, resources to refresh) it
/// posts as effects.
final class Health: SupervisorComponent {
    let shared: Shared
    private var timers: [RepeatedTask] = []

    init(_ shared: Shared) {
        self.shared = shared
    }

    func start() {
        // One tick for the memory sampler and the watchdog: a worker with something inside
        // (requests, links) is looked at on each tick it is due; one with nothing inside only
        // every `idleCheckIntervalMs`, all of those in one tick. So idle workers cost the loop
        // about nothing between their checks, however many there are.
        every(.milliseconds(Int64(tickMs))) { [self] in tick(now: .now()) }
        // Daily live resources: checked hourly, each refreshed when a day old.
        every(.hours(1)) { [self] in
            for record in table.all where record.phase == .running && record.manifest.resources?.daily == true {
                effects.post(.refreshResources(record))
            }
        }
        // An embedded supervisor's metrics, moved to the program's swift-metrics backend.
        if metrics.mirror != nil {
            every(.seconds(1)) { [self] in metrics.flushMirror() }
        }
    }

    func stop() {
        for t in timers { t.cancel() }
        timers = []
    }

    private func every(_ interval: TimeAmount, _ body: @escaping () -> Void) {
        let body = handOff(body)
        timers.append(loop.scheduleRepeatedTask(initialDelay: interval, delay: interval) { _ in body.value() })
    }

    /// How often a worker with something inside has its memory sampled.
    static let memoryIntervalMs = 250
    /// The health tick: the memory interval, or the ping interval where that is shorter.
    private var tickMs: Int { min(Self.memoryIntervalMs, config.pingIntervalMs) }
    /// When memory was last sampled, the watchdog last ran, and idle workers were last checked.
    private var lastMemory = NIODeadline.uptimeNanoseconds(0)
    private var lastPing = NIODeadline.uptimeNanoseconds(0)
    private var lastIdleCheck = NIODeadline.uptimeNanoseconds(0)
    /// When the next idle stop may be due (SPEC §16): the earliest `IdleStop.Verdict.check(at:)`
    /// of the last look. Plugins are looked at only then, not on every tick.
    private var nextIdleStop = NIODeadline.uptimeNanoseconds(0)

    /// One tick: what is due of the memory sampler and the watchdog (a timer's tick may come a
    /// little early or late: half a tick of slack).
    private func tick(now: NIODeadline) {
        func due(_ last: NIODeadline, _ intervalMs: Int) -> Bool { now - last >= .milliseconds(Int64(intervalMs - tickMs / 2)) }
        let idleDue = due(lastIdleCheck, config.idleCheckIntervalMs)
        if idleDue { lastIdleCheck = now }
        let memoryDue = due(lastMemory, Self.memoryIntervalMs)
        if memoryDue { lastMemory = now }
        let pingDue = due(lastPing, config.pingIntervalMs) || idleDue
        if pingDue { lastPing = now }
        guard memoryDue || pingDue || now >= nextIdleStop else { return }
        // Between idle checks only the workers that may have something inside are looked at.
        let looked = idleDue ? Array(table.all) : watchedRecords()
        if memoryDue || idleDue { checkMemory(looked, busy: memoryDue, idle: idleDue) }
        if pingDue { watchdog(looked, now: now, idleToo: idleDue) }
        if now >= nextIdleStop { stopIdlePlugins(now: now) }
        for instance in table.watched.values where !Self.starting(instance) {
            // Its idle stop, if it has one, may be due before the next look: one that stays watched
            // too (held by callers' links, which keep it watched for good, until it had no traffic
            // for its time and theirs: `IdleStop.linkReportsMs`).
            if let record = table.record(servedBy: instance), record.phase == .running, record.idleStopping == nil,
               let limit = config.idleStopMs(of: record.manifest) {
                let wait = instance.linksIn.isEmpty ? limit : max(limit, IdleStop.linkReportsMs)
                nextIdleStop = min(nextIdleStop, max(record.lastTraffic, instance.spawnedAt) + .milliseconds(Int64(wait)))
            }
            // What has nothing inside and no ping out leaves the watch until something is sent to
            // it (PluginTable.watch).
            if !Self.busy(instance) { table.unwatch(instance) }
        }
    }

    /// The plugins whose serving worker is watched (PluginTable.watched), each once.
    private func watchedRecords() -> [PluginRecord] {
        var seen = Set<String>()
        return table.watched.values.compactMap { instance in
            guard let record = table.record(servedBy: instance), seen.insert(instance.identifier).inserted else { return nil }
            return record
        }
    }

    /// Not running yet: its start-up is watched (memory sampled as a busy worker's).
    private static func starting(_ instance: WorkerInstance) -> Bool {
        if case .start = instance.awaiting { return true }
        return false
    }

    /// Stops the running plugins that had no traffic for their `idleStopMs` (SPEC §16): cleanly,
    /// their callers' links taken back first (`stopWorker`); they are `inactive` once their worker
    /// has ended. A plugin with a request inside or waiting, a stream, or a change under way is
    /// busy, and counts as having traffic now. Returns nothing; notes when to look next.
    private func stopIdlePlugins(now: NIODeadline) {
        var next = NIODeadline.distantFuture
        for record in table.all where record.phase == .running && record.idleStopping == nil {
            guard let limit = config.idleStopMs(of: record.manifest), let instance = record.instance else { continue }
            // A standby kept beside it (`standbyWorkers: "always"`) is no change under way: the
            // idle stop discards it.
            let changing: Bool
            if case .standby(let standby) = record.next { changing = !standby.isKept } else { changing = !record.next.isNone }
            let busy = instance.phase != .running || !instance.pending.isEmpty || !record.waiting.isEmpty
                || changing || record.update.isStarting || !record.retiring.isEmpty
            if busy { record.lastTraffic = now }
            // A worker's start counts as traffic: a plugin just started (activated for a dependent,
            // say) has its whole `idleStopMs` before it may stop.
            let facts = IdleStop.Facts(phase: record.phase, idleStopMs: limit, lastTraffic: max(record.lastTraffic, instance.spawnedAt).instant,
                                       busy: busy, linked: !instance.linksIn.isEmpty)
            switch IdleStop.decide(facts, now: now.instant) {
            case .stop(let idleMs):
                record.idleStopping = idleMs
                logger.info("\(record.identifier): no traffic for \(idleMs) ms (idleStopMs \(limit)): stopping it until it is needed",
                            metadata: ["plugin": "\(record.identifier)", "pid": "\(instance.pid)"])
                effects.post(.stopIdle(record))
            case .check(let at):
                next = min(next, at.deadline)
            case .never:
                break
            }
        }
        // Not before the next tick; a new plugin's first look is at most `idleCheckIntervalMs` away.
        nextIdleStop = min(next, now + .milliseconds(Int64(config.idleCheckIntervalMs)))
    }

    /// Whether `instance` has something inside that someone waits for: requests in flight, links
    /// from callers, or a ping of its own unanswered.
    private static func busy(_ instance: WorkerInstance) -> Bool {
        if case .pong = instance.awaiting { return true }
        return !instance.pending.isEmpty || !instance.linksIn.isEmpty
    }

    /// Pings every running worker that is busy (and, with `idleToo`, every other one); one whose
    /// previous ping is unanswered past `pingTimeoutMs` is killed. The worker answers pings on its
    /// I/O thread, so a plugin that blocks its `receive` is caught. A worker with nothing inside
    /// is pinged only every `idleCheckIntervalMs`: a call sent to it makes it busy, and pinged,
    /// from the next tick on.
    private func watchdog(_ records: [PluginRecord], now: NIODeadline, idleToo: Bool) {
        for record in records where record.phase == .running && !config.isDebugged(record.identifier) {
            // A worker being stopped has its own deadlines (the drain, then `willTerminate`'s grace
            // period): a plugin slow to finish is stopped as that, not killed by the watchdog.
            guard let instance = record.instance, let channel = instance.channel, !instance.phase.stopRequested else { continue }
            switch instance.awaiting {
            case .start:
                // Not running yet: its start-up timeout watches it.
                continue
            case .pong(_, let sentAt):
                if now - sentAt > .milliseconds(Int64(config.pingTimeoutMs)) {
                    effects.post(.kill(instance, .watchdog, "no pong within \(config.pingTimeoutMs) ms"))
                }
                continue
            case .nothing:
                guard idleToo || Self.busy(instance) else { continue }
            }
            let id = instance.takeID()
            instance.pinged(id: id, at: now)
            // Its pong is waited for on the ticks that follow.
            table.watch(instance)
            var ping = outbox.encoder(.ping, for: channel)
            ping.uint("id", id)
            outbox.write(ping.finish(), to: channel)
        }
    }

    /// Samples the resident and data size (/proc/<pid>/statm) of the workers that are busy or
    /// starting (with `busy`) and of the others (with `idle`). Over the soft limit a plugin gets
    /// `memoryWarning` (once per excursion); over the hard limit it is killed (`memoryLimit`). The
    /// kernel holds the hard limit meanwhile (RLIMIT_DATA, and the cgroup's memory.max where there
    /// is one).
    private func checkMemory(_ records: [PluginRecord], busy: Bool, idle: Bool) {
        for record in records where record.phase == .running || record.phase.isStarting {
            guard let instance = record.instance, !instance.phase.hasExited,
                  record.phase.isStarting || Self.busy(instance) ? busy : idle,
                  let statm = try? FileSystem.readFile("/proc/\(instance.pid)/statm", limit: 256),
                  let sample = MemoryLimits.parseStatm(statm) else { continue }
            instance.memory.resident = sample.resident
            instance.memory.data = sample.data
            let limits = MemoryLimits(record.manifest)
            // cgroup v2: the group went over memory.high (it is being throttled) since the last look.
            if let high = instance.cgroup?.memoryHighEvents(), high > instance.memoryHighEvents {
                instance.memoryHighEvents = high
                if record.phase == .running, !instance.memory.warned {
                    instance.memory.warned = true
                    logger.warning("\(record.identifier) reached its cgroup's memory.high (\(limits.soft >> 20) MiB): sending memoryWarning",
                                   metadata: ["plugin": "\(record.identifier)"])
                    shared.sendEvent(record, .memoryWarning) { _ in }
                    continue
                }
            }
            // Near a limit, what it holds decides: what its group is charged for, else its own
            // anonymous and shared pages; not the pages of files it maps.
            var held = sample.resident
            if limits.mayMatter(resident: held) {
                held = instance.cgroup?.memoryHeld()
                    ?? (try? FileSystem.readFile("/proc/\(instance.pid)/status", limit: 8192)).flatMap(MemoryLimits.parseHeld)
                    ?? held
            }
            switch limits.verdict(resident: held, warned: instance.memory.warned) {
            case .overHard:
                effects.post(.kill(instance, .memoryLimit, "resident memory \(held >> 20) MiB (not counting mapped files) is over the limit of \(limits.hard >> 20) MiB"))
            case .overSoft where record.phase == .running:
                instance.memory.warned = true
                logger.warning("\(record.identifier) uses \(held >> 20) MiB, over its soft limit of \(limits.soft >> 20) MiB: sending memoryWarning",
                               metadata: ["plugin": "\(record.identifier)"])
                shared.sendEvent(record, .memoryWarning) { _ in }
            case .backUnderSoft:
                instance.memory.warned = false
            default:
                break
            }
        }
    }
}
