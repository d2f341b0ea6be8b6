/// The plugins found in the plugin folders, checked as a whole: duplicates, missing dependencies,
/// unmet version ranges and cycles. Plugins that cannot start are listed with why; the rest can.
/// Values only: `PluginCatalog(directories:)` (Bundles) reads the folders and the bundles' file
/// permissions, and the supervisor's core judges installs with it (`InstallVerdict`).
public struct PluginCatalog: Sendable {
    /// Plugins that can be started, by identifier.
    public private(set) var manifests: [String: Manifest] = [:]
    /// Plugins known by identifier that cannot start, with the reason.
    public private(set) var unstartable: [String: String] = [:]
    /// Manifests that could not be used at all (unreadable, invalid, duplicate).
    public private(set) var problems: [String] = []
    /// Every identifier in a dependency-respecting order (dependencies first), startable or not.
    public private(set) var order: [String] = []
    /// All manifests with an identifier, startable or not.
    public private(set) var all: [String: Manifest] = [:]

    /// `unusable`: stand-ins for bundles whose plugin.json cannot be used (`Manifest.unusable`), with
    /// why; each is unstartable, and so is whatever depends on it. `refusal`: why a bundle may not
    /// be loaded as it is on disk (its files' permissions, SPEC §9), asked of each usable one.
    public init(manifests list: [Manifest], problems: [String] = [], unusable: [(Manifest, String)] = [],
                refusal: (Manifest) -> String? = { _ in nil }) {
        self.problems = problems
        for m in list {
            if let first = all[m.identifier] {
                self.problems.append("\(m.file): field 'identifier': duplicate identifier \(m.identifier), already used by \(first.file); this bundle is ignored")
                continue
            }
            all[m.identifier] = m
        }
        for (placeholder, reason) in unusable {
            // Its name is taken by a usable bundle (or another unusable one): logged, not listed.
            if let first = all[placeholder.identifier] {
                self.problems.append("\(reason) (not listed: \(placeholder.identifier) is \(first.file)'s)")
                continue
            }
            all[placeholder.identifier] = placeholder
            unstartable[placeholder.identifier] = reason
        }
        for m in all.values where unstartable[m.identifier] == nil {
            if let problem = refusal(m) { unstartable[m.identifier] = "\(m.file): refused: \(problem)" }
        }
        // Missing dependencies and unmet version ranges.
        for m in all.values.sorted(by: { $0.identifier < $1.identifier }) where unstartable[m.identifier] == nil {
            for dep in m.dependencies {
                guard let target = all[dep.identifier] else {
                    unstartable[m.identifier] = "\(m.file): dependency \(dep.identifier) is not installed"
                    break
                }
                // A stand-in for an unusable plugin.json has no version to check: "cannot start" below.
                if target.isStandIn { continue }
                if let range = dep.range, let r = VersionRange(range), !r.contains(target.version) {
                    unstartable[m.identifier] = "\(m.file): dependency \(dep.identifier) \(range) is not met by the installed \(target.version)"
                    break
                }
            }
        }
        // Cycles, each reported whole.
        for cycle in Self.cycles(all) {
            let text = (cycle + [cycle[0]]).joined(separator: " → ")
            for id in cycle where unstartable[id] == nil {
                unstartable[id] = "\(all[id]!.file): dependency cycle \(text)"
            }
        }
        order = Self.topologicalOrder(all)
        // A plugin whose dependency cannot start does not start either.
        for id in order where unstartable[id] == nil {
            if let bad = all[id]!.dependencies.first(where: { unstartable[$0.identifier] != nil }) {
                unstartable[id] = "\(all[id]!.file): dependency \(bad.identifier) cannot start"
            }
        }
        for (id, m) in all where unstartable[id] == nil { manifests[id] = m }
    }

    /// Elementary cycles found by depth-first search, each listed once, starting at its smallest id.
    static func cycles(_ all: [String: Manifest]) -> [[String]] {
        enum Mark { case visiting, done }
        var marks: [String: Mark] = [:]
        var stack: [String] = []
        var found: [[String]] = []
        var seen = Set<String>()
        func visit(_ id: String) {
            marks[id] = .visiting
            stack.append(id)
            for dep in all[id]?.dependencies ?? [] where all[dep.identifier] != nil {
                switch marks[dep.identifier] {
                case .visiting:
                    let start = stack.lastIndex(of: dep.identifier)!
                    var cycle = Array(stack[start...])
                    let minIndex = cycle.indices.min(by: { cycle[$0] < cycle[$1] })!
                    cycle = Array(cycle[minIndex...] + cycle[..<minIndex])
                    let key = cycle.joined(separator: ",")
                    if seen.insert(key).inserted { found.append(cycle) }
                case .done: break
                case nil: visit(dep.identifier)
                }
            }
            stack.removeLast()
            marks[id] = .done
        }
        for id in all.keys.sorted() where marks[id] == nil { visit(id) }
        return found
    }

    /// Kahn's algorithm; plugins caught in cycles are appended at the end.
    static func topologicalOrder(_ all: [String: Manifest]) -> [String] {
        var indegree: [String: Int] = [:]
        var dependents: [String: [String]] = [:]
        for (id, m) in all {
            indegree[id, default: 0] += 0
            for dep in m.dependencies where all[dep.identifier] != nil {
                indegree[id, default: 0] += 1
                dependents[dep.identifier, default: []].append(id)
            }
        }
        // A queue read front to back (`ready[next...]`): linear in the plugins, as is what is left
        // over (the members of cycles), found with a set.
        var ready = indegree.filter { $0.value == 0 }.map(\.key).sorted()
        var next = 0
        while next < ready.count {
            let id = ready[next]
            next += 1
            for d in (dependents[id] ?? []).sorted() {
                indegree[d]! -= 1
                if indegree[d] == 0 { ready.append(d) }
            }
        }
        let placed = Set(ready)
        let rest = all.keys.filter { !placed.contains($0) }.sorted()
        return ready + rest
    }
}
