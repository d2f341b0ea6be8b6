#if canImport(Glibc)
import Glibc
#endif
import Bundles
import NIOCore
import SupervisorCore

/// The plugins the supervisor knows, in start order, and their live workers by pid: the one owner
/// of that state. Every access asserts it is on the supervisor's event loop.
final class PluginTable {
    let loop: EventLoop
    private var records: [String: PluginRecord] = [:]
    /// Start order (dependencies first).
    private(set) var order: [String] = []
    /// Live workers by pid (for SO_PEERCRED checks on the control socket).
    private var byPID: [pid_t: WorkerInstance] = [:]
    /// Workers that may have something inside (a start under way, a request sent, a caller's link,
    /// a ping unanswered) since the health tick last found them with nothing: the tick looks at
    /// these only, and at every worker every `idleCheckIntervalMs`, so that idle workers cost it
    /// nothing however many there are (Health.swift).
    private(set) var watched: [ObjectIdentifier: WorkerInstance] = [:]
    /// The plugin folders as last scanned.
    var catalog = PluginCatalog(manifests: [])

    init(loop: EventLoop) {
        self.loop = loop
    }

    subscript(_ identifier: String) -> PluginRecord? {
        loop.assertInEventLoop()
        return records[identifier]
    }

    /// Every record, in start order.
    var inOrder: [PluginRecord] {
        loop.assertInEventLoop()
        return order.compactMap { records[$0] }
    }

    /// `items` in the start order of the plugins they name (dependencies first); those that name
    /// no known plugin last, in the order they came.
    func inStartOrder<Item>(_ items: [Item], by identifier: (Item) -> String) -> [Item] {
        loop.assertInEventLoop()
        let rank = Dictionary(order.enumerated().map { ($1, $0) }) { first, _ in first }
        return items.sorted { rank[identifier($0), default: .max] < rank[identifier($1), default: .max] }
    }

    var all: Dictionary<String, PluginRecord>.Values {
        loop.assertInEventLoop()
        return records.values
    }

    var identifiers: Dictionary<String, PluginRecord>.Keys { records.keys }

    /// Adds a plugin at the end of the start order (its dependencies are already known).
    func add(_ record: PluginRecord) {
        loop.preconditionInEventLoop()
        if records.updateValue(record, forKey: record.identifier) == nil { order.append(record.identifier) }
    }

    /// Forgets a plugin, if `record` is still the one known under its identifier.
    func remove(_ record: PluginRecord) {
        loop.preconditionInEventLoop()
        guard records[record.identifier] === record else { return }
        records[record.identifier] = nil
        order.removeAll { $0 == record.identifier }
    }

    /// Replaces the start order (after a rescan); unknown identifiers are dropped.
    func reorder(_ newOrder: [String]) {
        loop.preconditionInEventLoop()
        order = newOrder.filter { records[$0] != nil }
    }

    /// Whether every dependency of `record` is running.
    func dependenciesRunning(_ record: PluginRecord) -> Bool {
        dependenciesRunning(record.manifest)
    }

    /// Whether every dependency `manifest` names is running.
    func dependenciesRunning(_ manifest: Manifest) -> Bool {
        manifest.dependencies.allSatisfy { records[$0.identifier]?.phase == .running }
    }

    /// Plugins that list `identifier` among their dependencies, in start order.
    func dependents(of identifier: String) -> [PluginRecord] {
        inOrder.filter { $0.dependencyIDs.contains(identifier) }
    }

    func workerSpawned(_ instance: WorkerInstance) {
        loop.preconditionInEventLoop()
        byPID[instance.pid] = instance
        watch(instance)
    }

    func workerReaped(_ instance: WorkerInstance) {
        loop.preconditionInEventLoop()
        if byPID[instance.pid] === instance { byPID[instance.pid] = nil }
        unwatch(instance)
    }

    /// `instance` may have something inside now: the health tick looks at it from its next round.
    func watch(_ instance: WorkerInstance) {
        watched[ObjectIdentifier(instance)] = instance
    }

    /// The health tick found nothing inside `instance` (or it ended).
    func unwatch(_ instance: WorkerInstance) {
        watched[ObjectIdentifier(instance)] = nil
    }

    /// The plugin `instance` serves (its current worker), or nil (a successor, standby, retiring
    /// worker, or one of a plugin no longer known).
    func record(servedBy instance: WorkerInstance) -> PluginRecord? {
        guard let record = self[instance.identifier], record.instance === instance else { return nil }
        return record
    }

    func worker(pid: pid_t) -> WorkerInstance? {
        loop.assertInEventLoop()
        return byPID[pid]
    }

    /// Every worker not yet reaped, whatever its role.
    var liveWorkers: Dictionary<pid_t, WorkerInstance>.Values {
        loop.assertInEventLoop()
        return byPID.values
    }
}
