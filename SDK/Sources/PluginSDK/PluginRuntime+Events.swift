#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif
import PluginProtocol

/// Lifecycle events (`startup`, `willTerminate`, …): run one at a time, in the order they came, and
/// acknowledged once the plugin's handler returns.
extension PluginRuntime {
    struct EventWork: Sendable {
        var id: UInt64
        var name: String
        var payload: [UInt8]?
    }

    /// An event from the supervisor: queued for the events' loop (`handleEvent`).
    func eventArrived(_ env: Envelope, _ bytes: UnsafeRawBufferPointer) {
        guard let id = env.id else { return }
        let name = Envelope.string(bytes, env.name) ?? ""
        // Events run one at a time: without this, `willTerminate` would wait behind a
        // `startup` still running until the supervisor's grace period ended the worker.
        if name == EventName.willTerminate.rawValue {
            starting.withLock { s in
                s.stopping = true
                return s.task
            }?.cancel()
        }
        events.yield(EventWork(id: id, name: name, payload: env.payload.map { Array(bytes[$0]) }))
    }

    func handleEvent(_ work: EventWork) async {
        do {
            switch EventName(rawValue: work.name) {
            case .startup:
                let payload = try work.payload.map { (bytes) throws(JSONReadingError) in try StartupPayload(reading: bytes) }
                let ctx = PluginContext(
                    runtime: self, identifier: payload?.identifier ?? "", version: payload?.version ?? "",
                    dataDirectory: payload?.dataDirectory ?? "", bundleDirectory: payload?.bundleDirectory ?? "",
                    liveDirectory: payload?.liveDirectory)
                try checkDeclarations(payload)
                let plugin = self.plugin
                let task = Task { try await plugin.startup(ctx) }
                // A `willTerminate` that came before this line cancels it here.
                if starting.withLock({ s in s.task = task; return s.stopping }) { task.cancel() }
                defer { starting.withLock { $0.task = nil } }
                do {
                    try await task.value
                } catch is CancellationError {
                    throw PluginError(.unavailable, "startup was cancelled: the plugin is being stopped")
                }
            case .launch: await plugin.launch()
            case .willTerminate: await plugin.willTerminate()
            case .memoryWarning:
                // The tasks kept for later calls go first (each holds its object and a slab).
                callTasks.trim()
                inlineCallTasks.trim()
                await plugin.memoryWarning()
            case .background: await plugin.background()
            case .foreground: await plugin.foreground()
            case .resourceUpdated:
                struct P: Decodable { var name: String; var path: String }
                if let raw = work.payload, let p = try? JSONDecoder().decode(P.self, from: Data(raw)) {
                    await plugin.resourceUpdated(name: p.name, path: p.path)
                }
            case .dependencyRestarted:
                struct P: Decodable { var identifier: String }
                if let raw = work.payload, let p = try? JSONDecoder().decode(P.self, from: Data(raw)) {
                    await plugin.dependencyRestarted(p.identifier)
                }
            case nil:
                break  // Unknown events are acknowledged; newer supervisors may send more.
            }
            reply(work.id, result: Array("null".utf8))
        } catch {
            reply(work.id, error: error)
        }
    }

    /// The type's own identifier and dependencies must agree with the manifest it was loaded under.
    private func checkDeclarations(_ payload: StartupPayload?) throws {
        let type = Swift.type(of: plugin)
        guard let payload else { return }
        if !type.identifier.isEmpty, type.identifier != payload.identifier {
            // A code of its own: the supervisor fails the plugin at once (a restart cannot cure it).
            throw PluginError(code: "identifierMismatch",
                              message: "this library implements \(type.identifier) but was loaded as \(payload.identifier): set \"identifier\": \"\(type.identifier)\" in \(payload.bundleDirectory)/plugin.json, or give the library a bundle of its own")
        }
        let manifest = Set(payload.dependencies ?? [])
        let undeclared = type.dependencies.filter { !manifest.contains($0) }
        if !undeclared.isEmpty {
            throw PluginError(code: "dependencyMismatch",
                              message: "the plugin needs \(undeclared.joined(separator: ", ")), missing from the dependencies in \(payload.bundleDirectory)/plugin.json: add \(undeclared.count == 1 ? "it" : "them") there")
        }
    }
}
