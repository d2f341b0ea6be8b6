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
        // Puts something else where its worker keeps its taken page's descriptor (plugin code shares
        // the worker's descriptors): `pipe`, `file` (a plain file of the page's size, not sealed) or
        // `closed`. The worker's own mapping of the page is untouched; what it sends when the next
        // supervisor binary asks for the page is not the page.
        api.method("swapTakenPage") { (kind: String) throws -> Int32 in
            guard let page = Self.takenPageDescriptor() else { throw PluginError(.pluginError, "no taken page among its descriptors") }
            var other: Int32
            switch kind {
            case "pipe":
                var ends: [Int32] = [-1, -1]
                guard pipe(&ends) == 0 else { throw PluginError(.pluginError, "pipe: \(String(cString: strerror(errno)))") }
                close(ends[1])
                other = ends[0]
            case "file":
                let path = try self.ctx().dataDirectory + "/notThePage"
                other = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0o600)
                guard other >= 0, ftruncate(other, 4096) == 0 else { throw PluginError(.pluginError, "cannot make \(path)") }
            case "closed":
                close(page)
                return page
            default:
                throw PluginError(.badRequest, "kind: pipe, file or closed")
            }
            guard dup2(other, page) == page else { throw PluginError(.pluginError, "dup2: \(String(cString: strerror(errno)))") }
            close(other)
            return page
        }
        // What `tally` noted so far, in order (over every worker of this plugin).
        api.method("ran") { () throws -> [Int] in
            try self.read("ran").split(separator: "\n").compactMap { Int($0) }
        }
    }

    /// The descriptor of the worker's taken page: the one regular file of one page sealed against
    /// shrinking and growing (F_GET_SEALS 1034; F_SEAL_SHRINK 2, F_SEAL_GROW 4).
    private static func takenPageDescriptor() -> Int32? {
        (3..<256).first { fd in
            var st = stat()
            guard fstat(fd, &st) == 0, st.st_mode & S_IFMT == S_IFREG, st.st_size == 4096 else { return false }
            let seals = fcntl(fd, 1034)
            return seals >= 0 && seals & 6 == 6
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
