/// The order plugins stop in (SPEC §7): dependents before what they depend on, in waves. A
/// wave is every plugin of the set that no other plugin of the set depends on; the next wave
/// starts as the plugins of one end.
package enum StopOrder {
    /// The plugins of `live` (identifier → the identifiers it depends on) that may stop now: those
    /// none of `live` depends on. Should every one be needed (a cycle, which a catalog never
    /// starts), all of them, so that a stop always ends.
    package static func wave(of live: [String: [String]]) -> [String] {
        let needed = Set(live.values.joined())
        let free = live.keys.filter { !needed.contains($0) }
        return (free.isEmpty ? Array(live.keys) : free).sorted()
    }

    /// Every wave of `live`, first to last: what a stop of all of them does when each stops.
    package static func waves(of live: [String: [String]]) -> [[String]] {
        var left = live
        var all: [[String]] = []
        while !left.isEmpty {
            let next = wave(of: left)
            all.append(next)
            for id in next { left[id] = nil }
        }
        return all
    }
}
