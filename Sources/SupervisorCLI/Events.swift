#if canImport(Glibc)
import Glibc
#endif
import ArgumentParser
import LinuxSupport
import PluginProtocol
import Protocol
import SupervisorClient

struct Events: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "events",
        abstract: "Follow what happens to plugins (started, exited, restarting, failed, updated, installed, uninstalled, activated, deactivated) until interrupted.")

    @OptionGroup var options: ClientOptions

    @Flag(help: "One JSON object a line: event, plugin, time and the event's fields.")
    var json = false

    @OptionGroup var filter: PluginFilter

    func run() throws {
        let outcome: Result<Void, SupervisorConnection.Failure> = follow()
        if case .failure(let failure) = outcome {
            StandardError.write("\(failure)\n")
            throw ExitCode(failure.isRemote ? 1 : 2)
        }
        StandardError.write("the supervisor closed the connection (it stopped)\n")
    }

    private func follow() -> Result<Void, SupervisorConnection.Failure> {
        do throws(SupervisorConnection.Failure) {
            let connection = try options.connect()
            defer { connection.close() }
            // A name no plugin has (a typo, say) is followed too, for one installed later: said
            // once, so that nobody waits without knowing.
            if let plugin = filter.plugin, let list = try? ProtocolJSON.decode([PluginStatus].self, from: try connection.request(.status)),
               !list.contains(where: { $0.identifier == plugin }) {
                StandardError.write("supervisor events: no plugin \(plugin.printable) is installed now; following its events as they come (it may be installed later)\n")
            }
            let json = self.json
            try connection.followEvents(plugin: filter.plugin) { event in
                let line = json ? (try? ProtocolJSON.encode(event)).map { String(decoding: $0, as: UTF8.self) } ?? "" : EventLine.render(event).printable
                print(line)
                fflush(nil)
                return true
            }
            return .success(())
        } catch {
            return .failure(error)
        }
    }
}

/// One event as a line for people: time, event, plugin, then what the event says.
enum EventLine {
    static func render(_ e: HostEvent) -> String {
        var parts = [e.time, e.event.rawValue]
        if let plugin = e.plugin { parts.append(plugin) }
        if let version = e.version { parts.append(version) }
        if let from = e.from, let to = e.to { parts.append("\(from) → \(to)") }
        if let pid = e.pid { parts.append("pid \(pid)") }
        if let exit = e.lastExit {
            let reason = exit.reason == .exited || exit.reason == .signaled ? nil : exit.reason.rawValue
            parts.append([exit.code.map { "code \($0)" }, exit.signal, reason, exit.syscall].compactMap { $0 }.joined(separator: " "))
        }
        if let replayed = e.replayed, replayed > 0 { parts.append("\(replayed) replayed") }
        if let retried = e.retried, retried > 0 { parts.append("\(retried) retried") }
        if let attempt = e.attempt { parts.append("attempt \(attempt)") }
        if let delay = e.delayMs { parts.append("in \(delay) ms") }
        if let error = e.lastError { parts.append(error) }
        if let count = e.count { parts.append("\(count) missed") }
        if let trigger = e.trigger { parts.append("by \(trigger)") }
        if let idle = e.idleMs { parts.append("idle \(idle) ms") }
        return parts.joined(separator: "  ")
    }
}
