import ArgumentParser
import Protocol
import SupervisorClient
import SupervisorKit

struct Status: ParsableCommand {
    static let configuration = CommandConfiguration(commandName: "status", abstract: "Show every plugin's state, pid, restarts, last exit and sandbox.")

    @OptionGroup var options: ClientOptions

    @Flag(help: "Print a JSON array instead of a table.")
    var json = false

    func run() throws {
        try options.run(.status, readLimitMs: ClientOptions.quickAnswerMs, print: { raw in
            if json { return String(decoding: raw, as: UTF8.self) }
            guard let list = try? ProtocolJSON.decode([PluginStatus].self, from: raw) else { return String(decoding: raw, as: UTF8.self) }
            return StatusTable.render(list)
        })
    }
}

enum StatusTable {
    static func render(_ list: [PluginStatus]) -> String {
        if list.isEmpty { return "no plugins" }
        var rows = [["PLUGIN", "VERSION", "STATE", "PID", "RESTARTS", "LAST EXIT", "SANDBOX"]]
        for p in list {
            var exit = "-"
            if let e = p.lastExit {
                exit = [e.code.map { "code \($0)" }, e.signal, e.reason == .exited || e.reason == .signaled ? nil : e.reason.rawValue, e.syscall]
                    .compactMap { $0 }.joined(separator: " ")
            }
            var sandbox = p.sandbox.isEmpty ? "-" : "\(p.sandbox.count) layers"
            if let missing = p.sandboxMissing, !missing.isEmpty { sandbox += ", \(missing.count) missing" }
            rows.append([p.identifier, p.version, p.state, p.pid.map(String.init) ?? "-", String(p.restarts), exit, sandbox])
        }
        let widths = (0..<rows[0].count).map { c in rows.map { $0[c].count }.max()! }
        var out = rows.map { row in
            row.enumerated().map { i, cell in i == row.count - 1 ? cell : cell.padding(to: widths[i]) }.joined(separator: "  ")
        }
        for p in list where p.error != nil { out.append("\(p.identifier): \(p.error!)") }
        // Recovered from, but worth knowing (an update rolled back after the new version crashed).
        for p in list where p.error == nil && p.lastError != nil { out.append("\(p.identifier): last error: \(p.lastError!)") }
        // What its sandbox refused it (a library that misbehaves for want of a permission).
        for p in list {
            guard let denials = p.sandboxDenials, !denials.isEmpty else { continue }
            let counted = denials.sorted { $0.key < $1.key }.map { "\($0.key) ×\($0.value)" }.joined(separator: ", ")
            out.append("\(p.identifier): the sandbox refused \(counted) (each with its arguments at --log-level debug; docs/sandbox.md says what each permission allows)")
        }
        for p in list where p.debug == true { out.append("\(p.identifier): debug mode (attach with gdb -p \(p.pid.map(String.init) ?? "<pid>"))") }
        for p in list { if let u = p.updating { out.append("\(p.identifier): \(u.version) is starting beside \(p.version) (pid \(u.pid))") } }
        // Peer links (docs/protocol.md): the dependencies a plugin calls without passing through here.
        for p in list { if let links = p.links, !links.isEmpty { out.append("\(p.identifier): calls \(links.joined(separator: ", ")) over a direct link") } }
        // Workers sandboxed ahead of a restart (one line for all: with `standbyWorkers: "always"`
        // every running plugin has one; `status --json` names each, `standbyPid`).
        let standbys = list.filter { $0.standbyPid != nil }.count
        if standbys > 0 { out.append("standby workers waiting to take a restart: \(standbys)") }
        if let layers = list.first(where: { !$0.sandbox.isEmpty })?.sandbox {
            out.append("sandbox layers: " + layers.joined(separator: " ") + "   (status --json lists each plugin's, and any missing)")
        }
        // The serving supervisor's version (it changes with `supervisor upgrade`).
        if let version = list.first?.supervisorVersion { out.append("supervisor \(version)") }
        // A name or a reason from a bundle (a folder's name) cannot move the cursor or start a line.
        return out.map(\.printable).joined(separator: "\n")
    }
}

extension String {
    func padding(to width: Int) -> String { count >= width ? self : self + String(repeating: " ", count: width - count) }
}

extension String {
    /// With control characters (but a tab) written as escapes, for a terminal (`LogText`).
    var printable: String { LogText.escaped(self) }
}
