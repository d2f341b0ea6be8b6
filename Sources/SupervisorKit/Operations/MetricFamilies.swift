/// SPEC §10's families whose series come with their first event: a call to a plugin, a restart, a
/// denial, an install, a stream, a crash's replay or retry, an upgrade, a dropped client. Until
/// then every exposition still has each one's HELP and TYPE lines, so a scraper (or an alert on a
/// family's absence) sees every family the supervisor exports from its first scrape on.
extension Metrics {
    static let eventFamilies: [(name: String, type: String, help: String)] = [
        ("plugin_calls_total", "counter", "Requests (call and open) to the plugin, by how they ended."),
        ("plugin_call_duration_seconds", "histogram",
         "Time from forwarding a request to the plugin until it was answered (replies, errors and timeouts)."),
        ("plugin_restarts_total", "counter", "Worker restarts by the restart policy, by the reason the worker ended."),
        ("plugin_sandbox_denials_total", "counter", "System calls a plugin's seccomp filter refused, by system call."),
        ("plugin_log_dropped_total", "counter",
         "Log messages (source log) and output lines (stdout, stderr) of the plugin dropped over their rate of 200 a second (and 1 MiB for log messages)."),
        ("supervisor_installs_total", "counter", "Installs and updates, by outcome: ok or the error code."),
        ("plugin_streams_total", "counter", "Calls to the plugin with a stream (an answer of chunks, an input of chunks, or both)."),
        ("plugin_stream_chunks_total", "counter", "Chunks of streams to and from the plugin, by direction: answer (from the plugin) or input (to it)."),
        ("plugin_calls_replayed_total", "counter",
         "Calls a plugin's worker held but its plugin had not started when the worker ended, sent to the next worker."),
        ("plugin_calls_retried_total", "counter",
         "Calls of idempotent methods a plugin had started when its worker ended, sent again to the next worker."),
        ("supervisor_upgrades_total", "counter", "Upgrades of the supervisor in place, by outcome: ok (counted by the new binary) or the error code."),
        ("supervisor_control_clients_dropped_total", "counter",
         "Control clients the supervisor dropped, by reason: protocolViolation, idle, unread (answers left unread past sixteen of the largest frames) or refused."),
    ]

    /// The HELP text of one of `eventFamilies`.
    static func help(_ family: String) -> String {
        eventFamilies.first { $0.name == family }?.help ?? ""
    }

    /// The HELP and TYPE lines of each of `eventFamilies` that has no series in `exposition` yet.
    static func familiesWithoutSeries(besides present: Set<String>) -> [UInt8] {
        var out: [UInt8] = []
        for family in eventFamilies where !present.contains(family.name) {
            out += Array("# HELP \(family.name) \(family.help)\n# TYPE \(family.name) \(family.type)\n".utf8)
        }
        return out
    }
}
