/// The order plugins stop in (SPEC §7): dependents before what they depend on. A shutdown and a
/// rescan's removals stop by it.
package enum StopOrder {
    /// A stop of a set of plugins as it goes (SPEC §7, docs/operations.md "Shutdown"): each plugin
    /// stops as soon as every plugin of the set that depends on it has stopped, not when the rest
    /// of its wave has, so a slow stop holds back only what it depends on. Each input costs the
    /// dependencies of the plugin that stopped, not a walk of the set (1,000 plugins stop at once).
    package struct Progress: Sendable, Equatable {
        /// Each plugin's dependencies within the set.
        private let dependencies: [String: Set<String>]
        /// Dependents of each plugin that have not stopped yet.
        private var dependents: [String: Int] = [:]
        private var notAsked: Set<String>
        private var underWay: Set<String> = []

        /// `live`: identifier → the identifiers it depends on (those outside the set are ignored).
        package init(_ live: [String: [String]]) {
            dependencies = live.mapValues { Set($0.filter { live[$0] != nil }) }
            notAsked = Set(live.keys)
            for id in live.keys { dependents[id] = 0 }
            for needed in dependencies.values { for id in needed { dependents[id, default: 0] += 1 } }
        }

        /// The plugins to stop first: those no plugin of the set depends on (all of them, should
        /// each be needed by another: a cycle, which a catalog never starts, so that a stop ends).
        package mutating func begin() -> [String] {
            ask(notAsked.filter { dependents[$0] == 0 })
        }

        /// `id`'s stop has ended: the plugins that may stop now.
        package mutating func stopped(_ id: String) -> [String] {
            guard underWay.remove(id) != nil else { return [] }
            var free: [String] = []
            for needed in dependencies[id] ?? [] {
                dependents[needed, default: 1] -= 1
                if dependents[needed] == 0, notAsked.contains(needed) { free.append(needed) }
            }
            return ask(free)
        }

        /// Every plugin of the set has been asked to stop, and each stop has ended.
        package var isDone: Bool { notAsked.isEmpty && underWay.isEmpty }

        private mutating func ask(_ free: some Collection<String>) -> [String] {
            // Nothing free and nothing under way while some are left: they need each other.
            let chosen = free.isEmpty && underWay.isEmpty ? Array(notAsked) : Array(free)
            notAsked.subtract(chosen)
            underWay.formUnion(chosen)
            return chosen.sorted()
        }
    }
}
