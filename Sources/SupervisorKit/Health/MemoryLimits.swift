#if canImport(Glibc)
import Glibc
#endif
import Bundles
import LinuxSupport
import SupervisorCore

/// A plugin's memory limits (SPEC §8) and what a sample means against them. Pure, unit-tested.
struct MemoryLimits: Equatable {
    /// The hard limit (bytes): the manifest's `limits.memoryMB`, else 1 GiB; the worker's RLIMIT_DATA too.
    var hard: Int
    /// The soft limit: `limits.softMemoryMB`, else three quarters of the hard limit.
    var soft: Int

    init(hard: Int, soft: Int) {
        self.hard = hard
        self.soft = soft
    }

    init(_ m: Manifest) {
        hard = (m.limits.memoryMB ?? Manifest.Limits.defaultMemoryMB) << 20
        soft = m.limits.softMemoryMB.map { $0 << 20 } ?? hard / 4 * 3
    }

    enum Verdict: Equatable {
        case overHard
        /// Over the soft limit (a warning is due unless one went out for this excursion).
        case overSoft
        /// Under 90 % of the soft limit again: the next excursion warns again.
        case backUnderSoft
        case unchanged
    }

    func verdict(resident: Int, warned: Bool) -> Verdict {
        if resident >= hard { return .overHard }
        if resident >= soft { return warned ? .unchanged : .overSoft }
        if resident < soft / 10 * 9 { return warned ? .backUnderSoft : .unchanged }
        return .unchanged
    }

    /// Whether a sample this large is worth a closer look (`parseHeld`): from 90 % of the soft
    /// limit, where a verdict can change.
    func mayMatter(resident: Int) -> Bool { resident >= soft / 10 * 9 }

    static let pageSize = Int(sysconf(Int32(_SC_PAGESIZE)))

    /// The memory a worker holds, from /proc/<pid>/status: its anonymous and shared-memory pages
    /// (`RssAnon` + `RssShmem`), not the pages of files it maps (its libraries, a database or a
    /// model it reads through `mmap`), which the kernel takes back when memory is short. A plugin
    /// reading a 200 MiB file through `mmap` under a 64 MiB limit holds little of it.
    static func parseHeld(_ bytes: [UInt8]) -> Int? {
        var anon: Int?
        var shmem: Int?
        for line in bytes.split(separator: UInt8(ascii: "\n")) {
            // "RssAnon:\t    1234 kB"
            let words = line.split(whereSeparator: { $0 == UInt8(ascii: " ") || $0 == UInt8(ascii: "\t") })
            guard words.count == 3, let value = Int(String(decoding: words[1], as: UTF8.self)) else { continue }
            switch String(decoding: words[0], as: UTF8.self) {
            case "RssAnon:": anon = value << 10
            case "RssShmem:": shmem = value << 10
            default: continue
            }
        }
        guard let anon, let shmem else { return nil }
        return anon + shmem
    }

    /// Resident and data bytes from /proc/<pid>/statm ("size resident shared text lib data dt").
    static func parseStatm(_ bytes: [UInt8]) -> (resident: Int, data: Int)? {
        let fields = String(decoding: bytes, as: UTF8.self).split(separator: " ")
        guard fields.count >= 6, let rssPages = Int(fields[1]), let dataPages = Int(fields[5]) else { return nil }
        return (rssPages * pageSize, dataPages * pageSize)
    }
}
