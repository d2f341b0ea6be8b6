import PluginSDK
#if canImport(Glibc)
import Glibc
#endif

/// Methods for the crash-replay tests (SPEC §15): synchronous, so they run one after another on
/// the worker's I/O thread and calls wait in its socket behind one that blocks; each run is written
/// to a file in the plugin's data folder, which outlives its workers, so a test reads what ran, in
/// what order, and whether anything ran twice.
extension TestKit {
    func exportReplay(_ api: PluginAPI) {
        // Blocks the I/O thread for `ms` (calls behind it wait, unread), after saying so in `blocking`.
        api.method("block") { (p: SleepParams) throws -> Int in
            try self.append(p.ms, to: "blocking")
            usleep(UInt32(max(0, p.ms)) * 1000)
            return p.ms
        }
        // Notes `n` in `ran` and answers it.
        api.method("tally") { (n: Int) throws -> Int in
            try self.append(n, to: "ran")
            return n
        }
        // Ends its worker; declared idempotent here, not in a manifest: sent again to each next worker.
        api.method("crashAgain", idempotent: true) { () -> Int in
            raise(SIGSEGV)
            return 0
        }
        // What `tally` noted so far, in order (over every worker of this plugin).
        api.method("ran") { () throws -> [Int] in
            try self.read("ran").split(separator: "\n").compactMap { Int($0) }
        }
    }

    private func append(_ n: Int, to name: String) throws {
        let path = try ctx().dataDirectory + "/" + name
        let fd = open(path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0o600)
        guard fd >= 0 else { throw PluginError(.pluginError, "cannot open \(path): \(String(cString: strerror(errno)))") }
        defer { close(fd) }
        let line = Array("\(n)\n".utf8)
        guard write(fd, line, line.count) == line.count else { throw PluginError(.pluginError, "cannot write \(path)") }
    }

    private func read(_ name: String) throws -> String {
        let path = try ctx().dataDirectory + "/" + name
        let fd = open(path, O_RDONLY | O_CLOEXEC)
        guard fd >= 0 else { return "" }
        defer { close(fd) }
        var text: [UInt8] = []
        var buffer = [UInt8](repeating: 0, count: 65536)
        while true {
            let n = Glibc.read(fd, &buffer, buffer.count)
            guard n > 0 else { break }
            text += buffer[0..<n]
        }
        return String(decoding: text, as: UTF8.self)
    }
}
