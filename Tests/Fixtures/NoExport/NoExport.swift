import PluginSDK

/// A Swift plugin whose author forgot the `@_cdecl("sp_plugin_create")` export: the worker must say
/// which line to add (the load-failure tests).
final class NoExport: Pluggable {
    init() {}

    func exports(_ api: PluginAPI) {
        api.method("ping") { () -> Int in 1 }
    }
}
