import CPluginABI

/// Carries a `Pluggable` type over the C ABI. A plugin library exports itself with one line:
///
/// ```swift
/// @_cdecl("sp_plugin_create")
/// public func spPluginCreate(_ host: OpaquePointer?) -> OpaquePointer? { PluginExport.create(Greeter.self, host: host) }
/// ```
public enum PluginExport {
    /// Makes the plugin and the `sp_plugin` the worker drives it through.
    /// `host` is the worker's `const sp_host *`; returns a `const sp_plugin *`, or nil on a version mismatch.
    public static func create<P: Pluggable>(_ type: P.Type, host: OpaquePointer?) -> OpaquePointer? {
        guard let host = UnsafePointer<sp_host>(host), host.pointee.abi_version == UInt32(SP_ABI_VERSION) else { return nil }
        let runtime = PluginRuntime(plugin: P(), host: host)
        let plugin = UnsafeMutablePointer<sp_plugin>.allocate(capacity: 1)
        plugin.initialize(to: sp_plugin(
            abi_version: UInt32(SP_ABI_VERSION),
            ctx: Unmanaged.passRetained(runtime).toOpaque(),
            receive: { ctx, json, len in
                guard let ctx, let json else { return }
                // The worker holds the runtime (`ctx`) until `destroy`: no retain and release of it per message.
                Unmanaged<PluginRuntime>.fromOpaque(ctx)._withUnsafeGuaranteedRef {
                    $0.receive(UnsafeRawBufferPointer(start: json, count: len))
                }
            },
            destroy: { ctx in
                guard let ctx else { return }
                Unmanaged<PluginRuntime>.fromOpaque(ctx).takeRetainedValue().shutdown()
            }))
        return OpaquePointer(plugin)
    }
}

/// Marks a library built with this SDK, so the worker can tell a Swift plugin that forgot its
/// `@_cdecl("sp_plugin_create")` line what to add (a C symbol: found by dlsym, never called by it).
@_cdecl("sp_swift_sdk_abi")
public func spSwiftSDKABI() -> UInt32 { UInt32(SP_ABI_VERSION) }
