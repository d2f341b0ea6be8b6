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
    /// The system is short of memory (`supervisor send memoryWarning`, SIGUSR1): drop caches.
    func memoryWarning() async
    /// Sent to the background (`supervisor send background`, SIGTSTP): do less until `foreground`.
    func background() async
    /// Back in the foreground (`supervisor send foreground`, SIGCONT).
    func foreground() async
    /// A live resource was refreshed; `path` is where its new copy is.
    func resourceUpdated(name: String, path: String) async
    /// A dependency restarted (it lost any state it had about this plugin).
    func dependencyRestarted(_ identifier: String) async

    /// Registers the methods and `plugin://` routes this plugin exports.
    func exports(_ api: PluginAPI)
}

/// The defaults: a plugin implements only the handlers it needs.
extension Pluggable {
    /// No identifier to check against the manifest's.
    public static var identifier: String { "" }
    /// No dependencies.
    public static var dependencies: [String] { [] }
    /// Does nothing: the plugin starts at once.
    public func startup(_ context: PluginContext) async throws {}
    /// Does nothing.
    public func launch() async {}
    /// Does nothing.
    public func willTerminate() async {}
    /// Does nothing.
    public func memoryWarning() async {}
    /// Does nothing.
    public func background() async {}
    /// Does nothing.
    public func foreground() async {}
    /// Does nothing.
    public func resourceUpdated(name: String, path: String) async {}
    /// Does nothing.
    public func dependencyRestarted(_ identifier: String) async {}
    /// Exports nothing: the plugin answers no method.
    public func exports(_ api: PluginAPI) {}
}
