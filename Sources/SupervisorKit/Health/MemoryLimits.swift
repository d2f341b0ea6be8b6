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
        hard = (m.limits.memoryMB ?? 1024) << 20
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

    static let pageSize = Int(sysconf(Int32(_SC_PAGESIZE)))

    /// Resident and data bytes from /proc/<pid>/statm ("size resident shared text lib data dt").
    static func parseStatm(_ bytes: [UInt8]) -> (resident: Int, data: Int)? {
        let fields = String(decoding: bytes, as: UTF8.self).split(separator: " ")
        guard fields.count >= 6, let rssPages = Int(fields[1]), let dataPages = Int(fields[5]) else { return nil }
        return (rssPages * pageSize, dataPages * pageSize)
    }
}
