#if canImport(Glibc)
import Glibc
#endif
import LinuxSupport
import SupervisorCore
import protocol CoreMetrics.TimerHandler
import NIOCore
import PluginProtocol
import Prometheus

/// The Prometheus families of SPEC §10, in a registry of swift-prometheus (whose metric types are
/// swift-metrics handlers). The registry is used directly rather than through swift-metrics'
/// global factory so that every family has its HELP text and the supervisor's metrics stay its own.
///
/// Counting on the call path is a few integer adds per answered request, on a plugin's
/// `CallMetrics` looked up once (CallMetrics says why not the library's types there). Gauges (up, memory) and CPU time are brought up to date when
/// someone scrapes. Confined to the event loop like the rest of the supervisor; the registry itself
/// is thread-safe, so the HTTP endpoint could emit from anywhere, but it asks the loop for
/// `exposition()` so the gauges are fresh.
final class Metrics: SupervisorComponent {
    unowned let shared: Shared
    let registry = PrometheusCollectorRegistry()
    /// The program's swift-metrics backend, for an embedded supervisor (`config.metricsFactory`).
    let mirror: MetricsMirror?

    private var calls: [String: CallMetrics] = [:]
    private var up: [String: Gauge] = [:]
    private var inactive: [String: Gauge] = [:]
    private var memory: [String: Gauge] = [:]
    private var cpu: [String: Counter] = [:]

    /// Nanoseconds as decimal seconds, without exponent or trailing zeros ("0.00005", "2.5", "10").
    static func seconds(_ nanoseconds: Int64) -> String {
        let whole = nanoseconds / 1_000_000_000
        var fraction = String(nanoseconds % 1_000_000_000)
        fraction = String(repeating: "0", count: 9 - fraction.count) + fraction
        while fraction.hasSuffix("0") { fraction.removeLast() }
        return fraction.isEmpty ? "\(whole)" : "\(whole).\(fraction)"
    }

    init(_ shared: Shared) {
        self.shared = shared
        mirror = shared.config.metricsFactory.map(MetricsMirror.init(factory:))
    }

    // MARK: Calls

    /// The handles for calls to `plugin`, made the first time it is called.
    func calls(_ plugin: String) -> CallMetrics {
        if let known = calls[plugin] { return known }
        let made = CallMetrics(registry: registry, plugin: plugin)
        made.timer = mirror?.timer(plugin: plugin)
        calls[plugin] = made
        return made
    }

    /// The stream counters of `plugin` (SPEC §13), made the first time it streams.
    func streams(_ plugin: String) -> StreamCounters {
        if let known = streamCounters[plugin] { return known }
        let made = StreamCounters(
            opened: registry.counter("plugin_streams_total", labels: [("plugin", plugin)], help: Self.help("plugin_streams_total")),
            answer: registry.counter("plugin_stream_chunks_total", labels: [("plugin", plugin), ("direction", "answer")],
                                     help: Self.help("plugin_stream_chunks_total")),
            input: registry.counter("plugin_stream_chunks_total", labels: [("plugin", plugin), ("direction", "input")],
                                    help: Self.help("plugin_stream_chunks_total")))
        streamCounters[plugin] = made
        return made
    }
    private var streamCounters: [String: StreamCounters] = [:]

    // MARK: Events counted where they happen

    /// A restart was scheduled after an exit for `reason` (an ExitReason's name).
    func restarted(_ plugin: String, reason: String) {
        count("plugin_restarts_total", [("plugin", plugin), ("reason", reason)],
              help: Self.help("plugin_restarts_total"))
    }

    /// Calls a worker of `plugin` held when it ended, sent to its next worker (SPEC §15):
    /// `replayed` its plugin never started, `retried` it had started, of idempotent methods.
    func resent(_ plugin: String, replayed: Int, retried: Int) {
        count("plugin_calls_replayed_total", [("plugin", plugin)], by: replayed, help: Self.help("plugin_calls_replayed_total"))
        count("plugin_calls_retried_total", [("plugin", plugin)], by: retried, help: Self.help("plugin_calls_retried_total"))
    }

    /// The plugin's sandbox refused `syscall` (a denial with EPERM, or a violation).
    func denied(_ plugin: String, syscall: String) {
        count("plugin_sandbox_denials_total", [("plugin", plugin), ("syscall", syscall)],
              help: Self.help("plugin_sandbox_denials_total"))
    }

    /// `n` of `plugin`'s log messages (`source` log) or output lines (stdout, stderr) dropped over their rate.
    func logsDropped(_ plugin: String, source: String, _ n: Int) {
        count("plugin_log_dropped_total", [("plugin", plugin), ("source", source)], by: n, help: Self.help("plugin_log_dropped_total"))
    }

    /// An install or update ended: `ok`, or its error code (docs/install.md).
    func installed(outcome: String) {
        count("supervisor_installs_total", [("outcome", outcome)], help: Self.help("supervisor_installs_total"))
    }

    /// An upgrade in place that did not happen (its error code); the one that did is counted by
    /// the new binary (`ok`), whose counters start from zero.
    func upgraded(outcome: String) {
        count("supervisor_upgrades_total", [("outcome", outcome)], help: Self.help("supervisor_upgrades_total"))
    }

    /// A control client was dropped: `protocolViolation` (garbage, a bad frame), `idle`, or
    /// `refused` (a worker, another uid, unreadable credentials). On the supervisor's own
    /// exposition only, not in an embedding program's metrics backend.
    func controlClientDropped(reason: String) {
        count("supervisor_control_clients_dropped_total", [("reason", reason)], help: Self.help("supervisor_control_clients_dropped_total"),
              mirrored: false)
    }

    /// Adds `amount` (one, unless said) to the counter `name` with `labels` (registered the first time), and to the
    /// embedding program's metrics backend unless `mirrored` is false.
    private func count(_ name: String, _ labels: [(String, String)], by amount: Int = 1, help: String, mirrored: Bool = true) {
        guard amount > 0 else { return }
        let key = labels.reduce(name) { $0 + "\u{0}" + $1.1 }
        cached(&counters, key) { registry.counter(name, labels: labels, help: help) }.increment(by: Int64(amount))
        counted.insert(name)
        if mirrored { mirror?.count(name, labels, by: Int64(amount)) }
    }
    /// The counters `count` made, by name and label values, and their families.
    private var counters: [String: Counter] = [:]
    private var counted: Set<String> = []

    /// The metric cached under `key`, made (and registered) the first time.
    private func cached<Metric>(_ cache: inout [String: Metric], _ key: String, _ make: () -> Metric) -> Metric {
        if let known = cache[key] { return known }
        let made = make()
        cache[key] = made
        return made
    }

    // MARK: CPU time

    /// Adds what a worker used since it was last counted. `total`: its CPU time so far (µs).
    func addCPU(_ instance: WorkerInstance, total: Int64) {
        let delta = total - instance.cpuCounted
        let counter = cpuCounter(instance.identifier)
        guard delta > 0 else { return }
        instance.cpuCounted = total
        counter.increment(by: Double(delta) / 1_000_000)
        mirror?.addCPU(plugin: instance.identifier, seconds: Double(delta) / 1_000_000)
    }

    /// A plugin's CPU counter, there (at 0) from its first scrape on.
    private func cpuCounter(_ plugin: String) -> Counter {
        cached(&cpu, plugin) {
            registry.counter("plugin_cpu_seconds_total", labels: [("plugin", plugin)],
                             help: "CPU time (user and system) used by the plugin's workers, all of them over the supervisor's life.")
        }
    }

    // MARK: Host programs (SPEC §12)

    private var hostListeners: Gauge?
    private var hostDropped: Counter?
    private var hostDroppedExported = 0
    private var hostProviders: Gauge?
    private var standbyWorkers: Gauge?
    /// Methods provided by the program and its clients, counted by `HostMethods`.
    var hostMethodProviders = 0

    /// The host families and the standby count, brought up to date at a scrape.
    private func exportHost() {
        let listeners = hostListeners ?? registry.gauge("supervisor_host_event_listeners", labels: [],
                                                        help: "Readers following the host events: an embedded host's streams and control clients' events requests.")
        hostListeners = listeners
        listeners.set(to: Double(shared.events.listenerCount))
        let dropped = hostDropped ?? registry.counter("supervisor_host_events_dropped_total", labels: [],
                                                      help: "Host events a reader missed because it did not keep up (it heard dropped with the count).")
        hostDropped = dropped
        let total = shared.events.droppedTotal
        if total > hostDroppedExported {
            dropped.increment(by: Double(total - hostDroppedExported))
            hostDroppedExported = total
        }
        let providers = hostProviders ?? registry.gauge("supervisor_host_method_providers", labels: [],
                                                        help: "Host methods provided, by the embedding program and by control clients (one per method and provider).")
        hostProviders = providers
        providers.set(to: Double(hostMethodProviders))
        let standbys = standbyWorkers ?? registry.gauge("supervisor_standby_workers", labels: [],
                                                        help: "Workers sandboxed ahead of a restart, waiting before their plugin loads (kept with standbyWorkers always, or spawned on a crash's notice).")
        standbyWorkers = standbys
        standbys.set(to: Double(table.all.filter { $0.standby != nil }.count))
    }

    /// Brings the program's backend up to date (`mirror`): every second, from `Health`.
    func flushMirror() {
        guard let mirror else { return }
        for record in table.all {
            let id = record.identifier
            mirror.set("plugin_up", [("plugin", id)], to: record.phase == .running ? 1 : 0)
            mirror.set("plugin_inactive", [("plugin", id)], to: record.phase == .inactive ? 1 : 0)
            var resident = 0
            if let instance = record.instance, !instance.phase.hasExited {
                resident = instance.memory.resident
                if let total = Self.cpuMicroseconds(pid: instance.pid) { addCPU(instance, total: total) }
            }
            mirror.set("plugin_resident_memory_bytes", [("plugin", id)], to: Double(resident))
        }
        for calls in calls.values { mirror.export(calls) }
    }

    static let ticksPerSecond = Int64(sysconf(Int32(_SC_CLK_TCK)))

    /// The CPU time (user and system, every thread) of a live process, in µs: from its CPU-time
    /// clock (`clock_getcpuclockid`, nanoseconds), else from /proc/<pid>/stat (clock ticks: 10 ms).
    static func cpuMicroseconds(pid: pid_t) -> Int64? {
        var clock = clockid_t()
        var now = timespec()
        if clock_getcpuclockid(pid, &clock) == 0, clock_gettime(clock, &now) == 0 {
            return Int64(now.tv_sec) * 1_000_000 + Int64(now.tv_nsec) / 1_000
        }
        guard let bytes = try? FileSystem.readFile("/proc/\(pid)/stat", limit: 1024) else { return nil }
        return parseStatCPU(bytes)
    }

    /// Fields 14 and 15 (utime, stime, in clock ticks) of a /proc/<pid>/stat line, as µs. The command
    /// name (field 2) may hold spaces and parentheses: counting starts after its last ')'.
    static func parseStatCPU(_ bytes: [UInt8]) -> Int64? {
        guard let close = bytes.lastIndex(of: UInt8(ascii: ")")) else { return nil }
        let fields = bytes[(close + 1)...].split(separator: UInt8(ascii: " "))
        // After ')': state is field 3, so utime (14) and stime (15) are at 11 and 12.
        guard fields.count > 12, let user = Int64(String(decoding: fields[11], as: UTF8.self)),
              let system = Int64(String(decoding: fields[12], as: UTF8.self)) else { return nil }
        return (user + system) * 1_000_000 / max(1, ticksPerSecond)
    }

    // MARK: Scrape

    /// The Prometheus text: gauges and CPU brought up to date first.
    func exposition() -> [UInt8] {
        loop.preconditionInEventLoop()
        var present = Set<String>()
        for record in table.all {
            let id = record.identifier
            present.insert(id)
            cached(&up, id) {
                registry.gauge("plugin_up", labels: [("plugin", id)], help: "1 while the plugin is running, else 0.")
            }.set(to: record.phase == .running ? 1.0 : 0.0)
            // Down by design (SPEC §16), which an alert on plugin_up == 0 leaves out with this.
            cached(&inactive, id) {
                registry.gauge("plugin_inactive", labels: [("plugin", id)], help: "1 while the plugin has no worker until it is needed (inactive), else 0.")
            }.set(to: record.phase == .inactive ? 1.0 : 0.0)
            var resident = 0
            if let instance = record.instance, !instance.phase.hasExited {
                // Read now: the 250 ms sample is not there yet for a worker that just started.
                resident = (try? FileSystem.readFile("/proc/\(instance.pid)/statm", limit: 256)).flatMap(MemoryLimits.parseStatm)?.resident
                    ?? instance.memory.resident
                if let total = Self.cpuMicroseconds(pid: instance.pid) { addCPU(instance, total: total) }
            }
            _ = cpuCounter(id)
            cached(&memory, id) {
                registry.gauge("plugin_resident_memory_bytes", labels: [("plugin", id)],
                               help: "Resident memory of the plugin's worker (0 when it has none).")
            }.set(to: Double(resident))
        }
        // A plugin that was removed has no state to show any more; its counters stay.
        for gone in Set(up.keys).subtracting(present) {
            if let g = up.removeValue(forKey: gone) { registry.unregisterGauge(g) }
            if let g = inactive.removeValue(forKey: gone) { registry.unregisterGauge(g) }
            if let g = memory.removeValue(forKey: gone) { registry.unregisterGauge(g) }
        }
        exportHost()
        let plugins = calls.keys.sorted()
        for plugin in plugins { calls[plugin]!.export() }
        var out = registry.emitToBuffer()
        if !plugins.isEmpty {
            out.append(contentsOf: "# HELP plugin_call_duration_seconds \(Self.help("plugin_call_duration_seconds"))\n".utf8)
            out.append(contentsOf: "# TYPE plugin_call_duration_seconds histogram\n".utf8)
            for plugin in plugins { calls[plugin]!.writeHistogram(into: &out) }
        }
        let called: Set<String> = plugins.isEmpty ? [] : ["plugin_calls_total", "plugin_call_duration_seconds"]
        let streamed: Set<String> = streamCounters.isEmpty ? [] : ["plugin_streams_total", "plugin_stream_chunks_total"]
        return out + Self.familiesWithoutSeries(besides: counted.union(called).union(streamed))
    }
}

/// One plugin's call counts and durations (outcomes and buckets as `CallHop` defines them).
/// Counting is the call path's only metrics work, so it is plain integers owned by the event loop
/// (no atomic, no lock: measured, the library's locked histogram and atomic counters cost the
/// supervisor 9 % of its CPU per call). A scrape moves the counts into swift-prometheus's counters
/// and writes the histogram lines itself, in the same exposition format.
/// A plugin's stream counters (Metrics.streams).
struct StreamCounters {
    let opened: Counter
    let answer: Counter
    let input: Counter
}

final class CallMetrics {
    let plugin: String
    private let counters: [Counter]
    /// The plugin's duration timer in the program's swift-metrics backend (embedded only).
    var timer: (any TimerHandler)?
    private var exported = [Int](repeating: 0, count: CallHop.Outcome.allCases.count)

    /// One allocation for every number the call path touches, so counting is plain stores: no
    /// array uniqueness or exclusivity checks, no retain of a shared array. Layout: the counts by
    /// outcome (`Outcome.index`), the observations per bucket (not cumulative, the last one past
    /// every bound), the sum of durations (ns) and the number of observations.
    private let slots: UnsafeMutablePointer<Int64>
    private static let outcomes = CallHop.Outcome.allCases.count
    private static let countsAt = 0
    private static let bucketsAt = countsAt + outcomes
    private static let sumAt = bucketsAt + CallHop.bucketCount
    private static let observedAt = sumAt + 1
    private static let slotCount = observedAt + 1

    init(registry: PrometheusCollectorRegistry, plugin: String) {
        self.plugin = plugin
        slots = .allocate(capacity: Self.slotCount)
        slots.initialize(repeating: 0, count: Self.slotCount)
        counters = CallHop.Outcome.allCases.map { outcome in
            registry.counter("plugin_calls_total", labels: [("plugin", plugin), ("outcome", outcome.label)],
                             help: Metrics.help("plugin_calls_total"))
        }
    }

    deinit {
        slots.deallocate()
    }

    /// A request that failed before it was forwarded (not running, full socket, not a dependency).
    @inline(__always)
    func count(_ outcome: CallHop.Outcome) {
        slots[Self.countsAt + outcome.index] &+= 1
    }

    /// An answered request: counted, and its duration observed.
    @inline(__always)
    func record(_ outcome: CallHop.Outcome, nanoseconds: Int64) {
        slots[Self.countsAt + outcome.index] &+= 1
        slots[Self.bucketsAt + CallHop.bucket(ofNanoseconds: nanoseconds)] &+= 1
        slots[Self.sumAt] &+= nanoseconds
        slots[Self.observedAt] &+= 1
        timer?.recordNanoseconds(nanoseconds)
    }

    /// Requests counted so far that ended as `outcome`.
    func count(of outcome: CallHop.Outcome) -> Int64 { slots[Self.countsAt + outcome.index] }

    /// Calls a caller's worker counted over a peer link (`linkCalls`), checked (`Tally.problem`).
    /// `a + b`, stopping at the largest count rather than wrapping: however long callers report.
    private static func plus(_ a: Int64, _ b: Int64) -> Int64 {
        let (sum, over) = a.addingReportingOverflow(b)
        return over ? .max : sum
    }

    func add(_ calls: CallHop.Tally) {
        let plus = Self.plus
        for outcome in CallHop.Outcome.allCases { slots[Self.countsAt + outcome.index] = plus(slots[Self.countsAt + outcome.index], calls.counts[outcome]) }
        for (i, n) in calls.buckets.prefix(CallHop.bucketCount).enumerated() { slots[Self.bucketsAt + i] = plus(slots[Self.bucketsAt + i], n) }
        slots[Self.sumAt] = plus(slots[Self.sumAt], calls.sumNs)
        slots[Self.observedAt] = plus(slots[Self.observedAt], calls.buckets.reduce(0, &+))
    }

    /// Moves the counts into the registry's counters.
    func export() {
        for i in 0..<Self.outcomes {
            let now = Int(slots[Self.countsAt + i])
            if now > exported[i] {
                counters[i].increment(by: Int64(now - exported[i]))
                exported[i] = now
            }
        }
    }

    /// The `plugin_call_duration_seconds` lines of this plugin.
    func writeHistogram(into out: inout [UInt8]) {
        let labels = "plugin=\"\(plugin)\""
        var cumulative: Int64 = 0
        for (i, bound) in CallHop.bucketBounds.enumerated() {
            cumulative = Self.plus(cumulative, slots[Self.bucketsAt + i])
            out.append(contentsOf: "plugin_call_duration_seconds_bucket{\(labels),le=\"\(Metrics.seconds(bound))\"} \(cumulative)\n".utf8)
        }
        let observed = slots[Self.observedAt]
        out.append(contentsOf: "plugin_call_duration_seconds_bucket{\(labels),le=\"+Inf\"} \(observed)\n".utf8)
        out.append(contentsOf: "plugin_call_duration_seconds_sum{\(labels)} \(Metrics.seconds(slots[Self.sumAt]))\n".utf8)
        out.append(contentsOf: "plugin_call_duration_seconds_count{\(labels)} \(observed)\n".utf8)
    }
}

extension PrometheusCollectorRegistry {
    /// A counter named in full (`name` is the family's whole name: swift-prometheus's descriptor
    /// would otherwise join a namespace, a subsystem and a unit to it).
    func counter(_ name: String, labels: [(String, String)], help: String) -> Counter {
        makeCounter(descriptor: MetricNameDescriptor(metricName: name, unitName: "", helpText: help), labels: labels)
    }

    /// A gauge named in full, as `counter`.
    func gauge(_ name: String, labels: [(String, String)], help: String) -> Gauge {
        makeGauge(descriptor: MetricNameDescriptor(metricName: name, unitName: "", helpText: help), labels: labels)
    }
}
