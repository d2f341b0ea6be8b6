import Bundles
import LinuxSupport
import Logging
import NIOCore
import PluginProtocol
import SupervisorCore

/// The supervisor's health timers: the watchdog's pings, memory limits, daily resource refreshes.
/// Each tick runs on the event loop; what it finds (a worker to kill, resources to refresh) it
/// posts as effects.
final class Health: SupervisorComponent {
    let shared: Shared
    private var timers: [RepeatedTask] = []

    init(_ shared: Shared) {
        self.shared = shared
    }

    func start() {
        // Memory: soft limit → memoryWarning, hard limit → memoryLimit.
        every(.milliseconds(250)) { [self] in checkMemory() }
        // Daily live resources: checked hourly, each refreshed when a day old.
        every(.hours(1)) { [self] in
            for record in table.all where record.phase == .running && record.manifest.resources?.daily == true {
                effects.post(.refreshResources(record))
            }
        }
        every(.milliseconds(Int64(config.pingIntervalMs))) { [self] in watchdog() }
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

    /// Pings every running worker; one whose previous ping is unanswered past `pingTimeoutMs` is killed.
    /// The worker answers pings on its I/O thread, so a plugin that blocks its `receive` is caught.
    private func watchdog() {
        let now = NIODeadline.now()
        for record in table.all where record.phase == .running && !config.isDebugged(record.identifier) {
            guard let instance = record.instance, let channel = instance.channel else { continue }
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
                break
            }
            let id = instance.takeID()
            instance.pinged(id: id, at: now)
            var ping = outbox.encoder(.ping, for: channel)
            ping.uint("id", id)
            outbox.write(ping.finish(), to: channel)
        }
    }

    /// Samples every worker's resident and data size (/proc/<pid>/statm). Over the soft limit a
    /// plugin gets `memoryWarning` (once per excursion); over the hard limit it is killed (`memoryLimit`).
    private func checkMemory() {
        for record in table.all where record.phase == .running || record.phase.isStarting {
            guard let instance = record.instance, !instance.phase.hasExited,
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
            switch limits.verdict(resident: sample.resident, warned: instance.memory.warned) {
            case .overHard:
                effects.post(.kill(instance, .memoryLimit, "resident memory \(sample.resident >> 20) MiB is over the limit of \(limits.hard >> 20) MiB"))
            case .overSoft where record.phase == .running:
                instance.memory.warned = true
                logger.warning("\(record.identifier) uses \(sample.resident >> 20) MiB, over its soft limit of \(limits.soft >> 20) MiB: sending memoryWarning",
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
