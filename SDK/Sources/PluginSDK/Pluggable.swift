/// A plugin, in ELMaestro's shape: an identifier, its dependencies, `startup`, lifecycle handlers,
/// and an exported API. Every handler has a default that does nothing, so a plugin implements only
/// what it needs. Export the type with one line (see `PluginExport`).
///
/// Handlers run on Swift concurrency tasks; lifecycle events are delivered one at a time, in order.
public protocol Pluggable: AnyObject, Sendable {
    /// The identifier this type implements. When not empty, `startup` fails unless the manifest's
    /// identifier is the same (catches a library put in the wrong bundle).
    static var identifier: String { get }
    /// Plugins this one calls. Each must also be a dependency in the manifest, or `startup` fails.
    static var dependencies: [String] { get }

    /// Made once per worker, before `startup`.
    init()

    /// Called once every dependency is running. Throwing here fails the plugin's start.
    func startup(_ context: PluginContext) async throws
    /// Every plugin has started.
    func launch() async
    /// The supervisor is shutting this plugin down; save state now.
    func willTerminate() async
    func memoryWarning() async
    func background() async
    func foreground() async
    /// A live resource was refreshed; `path` is where its new copy is.
    func resourceUpdated(name: String, path: String) async
    /// A dependency restarted (it lost any state it had about this plugin).
    func dependencyRestarted(_ identifier: String) async

    /// Registers the methods and `plugin://` routes this plugin exports.
    func exports(_ api: PluginAPI)
}

extension Pluggable {
    public static var identifier: String { "" }
    public static var dependencies: [String] { [] }
    public func startup(_ context: PluginContext) async throws {}
    public func launch() async {}
    public func willTerminate() async {}
    public func memoryWarning() async {}
    public func background() async {}
    public func foreground() async {}
    public func resourceUpdated(name: String, path: String) async {}
    public func dependencyRestarted(_ identifier: String) async {}
    public func exports(_ api: PluginAPI) {}
}
