import CoreMetrics
import PluginProtocol
import SupervisorCore

/// An embedded supervisor's metrics in the program's own swift-metrics backend (`PluginHost`,
/// docs/host.md): the SPEC §10 families under the same names and labels (`plugin_calls_total`
/// with `plugin` and `outcome`, …) as the program's counters, gauges and timers. Restarts,
/// sandbox denials and installs are counted where they happen; each answered call's duration goes
/// to its plugin's `plugin_call_duration_seconds` timer as it is settled; the call counts, `plugin_up`,
/// memory and CPU time are moved over once a second (`Metrics.flushMirror`), so the call path adds
/// no backend call beyond the timer's. The supervisor's own Prometheus registry keeps counting
/// too (`PluginHost.metrics()`, `supervisor metrics`). Confined to the event loop.
final class MetricsMirror {
    let factory: any MetricsFactory
    private var counters: [String: any CounterHandler] = [:]
    private var gauges: [String: any RecorderHandler] = [:]
    private var cpu: [String: any FloatingPointCounterHandler] = [:]
    /// What was already moved over of each plugin's call counts, by outcome.
    private var exportedCalls: [String: [Int64]] = [:]

    init(factory: any MetricsFactory) {
        self.factory = factory
    }

    private static func key(_ label: String, _ dimensions: [(String, String)]) -> String {
        dimensions.reduce(label) { $0 + "\u{0}" + $1.0 + "=" + $1.1 }
    }

    func count(_ label: String, _ dimensions: [(String, String)], by amount: Int64 = 1) {
        guard amount > 0 else { return }
        let key = Self.key(label, dimensions)
        let counter = counters[key] ?? factory.makeCounter(label: label, dimensions: dimensions)
        counters[key] = counter
        counter.increment(by: amount)
    }

    func set(_ label: String, _ dimensions: [(String, String)], to value: Double) {
        let key = Self.key(label, dimensions)
        let gauge = gauges[key] ?? factory.makeRecorder(label: label, dimensions: dimensions, aggregate: false)
        gauges[key] = gauge
        gauge.record(value)
    }

    func addCPU(plugin: String, seconds: Double) {
        let counter = cpu[plugin] ?? factory.makeFloatingPointCounter(label: "plugin_cpu_seconds_total", dimensions: [("plugin", plugin)])
        cpu[plugin] = counter
        counter.increment(by: seconds)
    }

    /// The plugin's call duration timer (made once, kept by its `CallMetrics`).
    func timer(plugin: String) -> any TimerHandler {
        factory.makeTimer(label: "plugin_call_duration_seconds", dimensions: [("plugin", plugin)])
    }

    /// Moves what `calls` counted since the last time.
    func export(_ calls: CallMetrics) {
        var done = exportedCalls[calls.plugin] ?? [Int64](repeating: 0, count: CallHop.Outcome.allCases.count)
        for outcome in CallHop.Outcome.allCases {
            let now = calls.count(of: outcome)
            count("plugin_calls_total", [("plugin", calls.plugin), ("outcome", outcome.label)], by: now - done[outcome.index])
            done[outcome.index] = now
        }
        exportedCalls[calls.plugin] = done
    }
}
