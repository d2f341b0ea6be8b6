import CLinuxSupport
#if canImport(Glibc)
import Glibc
#endif

/// Reading the host: this process's groups, the cgroup mounts, and a control file's text.
extension CgroupTree {
    /// This process's cgroup per controller ("" for v2), from /proc/self/cgroup.
    static func ownCgroups() -> [String: String] {
        var own: [String: String] = [:]
        for line in (read("/proc/self/cgroup") ?? "").split(separator: "\n") {
            let parts = line.split(separator: ":", maxSplits: 2, omittingEmptySubsequences: false)
            guard parts.count == 3 else { continue }
            if parts[1].isEmpty { own[""] = String(parts[2]) }
            for c in parts[1].split(separator: ",") { own[String(c)] = String(parts[2]) }
        }
        return own
    }

    /// Where cgroup2 and each v1 controller are mounted, from /proc/self/mountinfo.
    static func cgroupMounts() -> (v2: String?, v1: [String: String]) {
        var v2: String?
        var v1: [String: String] = [:]
        for line in (read("/proc/self/mountinfo", limit: 1 << 20) ?? "").split(separator: "\n") {
            // "<id> <parent> <dev> <root> <mount point> <options> [optional...] - <type> <source> <super options>"
            let halves = line.split(separator: " - ", maxSplits: 1)
            guard halves.count == 2 else { continue }
            let fields = halves[0].split(separator: " "), tail = halves[1].split(separator: " ")
            guard fields.count >= 5, tail.count >= 3 else { continue }
            let point = String(fields[4])
            if tail[0] == "cgroup2", v2 == nil { v2 = point }
            if tail[0] == "cgroup" {
                for option in tail[2].split(separator: ",") where controllers.contains(String(option)) { v1[String(option)] = point }
            }
        }
        return (v2, v1)
    }

    static func read(_ path: String, limit: Int = 64 << 10) -> String? {
        (try? FileSystem.readFile(path, limit: limit)).map { String(decoding: $0, as: UTF8.self).trimmingWhitespace() }
    }

    /// Writes `text` to a control file; nil on success, else why.
    static func write(_ path: String, _ text: String) -> String? {
        let fd = open(path, O_WRONLY | O_CLOEXEC)
        guard fd >= 0 else { return describe(errno) }
        defer { close(fd) }
        let n = text.withCString { Glibc.write(fd, $0, strlen($0)) }
        return n == text.utf8.count ? nil : describe(errno)
    }
}
