/// SPEC §10's families whose series come with their first event: a call to a plugin, a restart, a
/// denial, an install. Until then every exposition still has each one's HELP and TYPE lines, so a
/// scraper (or an alert on a family's absence) sees every family the supervisor exports from its
/// first scrape on.
extension Metrics {
    static let eventFamilies: [(name: String, type: String, help: String)] = [
        ("plugin_calls_total", "counter", "Requests (call and open) to the plugin, by how they ended."),
        ("plugin_call_duration_seconds", "histogram",
         "Time from forwarding a request to the plugin until it was answered (replies, errors and timeouts)."),
        ("plugin_restarts_total", "counter", "Worker restarts by the restart policy, by the reason the worker ended."),
        ("plugin_sandbox_denials_total", "counter", "System calls a plugin's seccomp filter refused, by system call."),
        ("supervisor_installs_total", "counter", "Installs and updates, by outcome: ok or the error code."),
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
