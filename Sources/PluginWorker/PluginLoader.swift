import CPluginABI
import LinuxSupport
#if canImport(Glibc)
import Glibc
#endif

/// Loads a plugin library and creates its plugin through the C ABI.
enum PluginLoader {
    /// dlopen(RTLD_NOW | RTLD_LOCAL), dlsym("sp_plugin_create"), the ABI check, then the create call.
    /// `dlopened` hears the monotonic microsecond the library was mapped and linked (its
    /// constructors run), before `create`: `status`'s `dlopenUs`.
    static func load(library path: String, host: UnsafePointer<sp_host>,
                     dlopened: (Int64) -> Void = { _ in }) throws(WorkerError) -> UnsafePointer<sp_plugin> {
        guard let handle = dlopen(path, RTLD_NOW | RTLD_LOCAL) else {
            let said = dlerror().map { String(cString: $0) } ?? "unknown dlopen error"
            throw .loadError(path, LibraryFile.problem(path).map { "\($0) (the loader said: \(said))" } ?? said)
        }
        dlopened(ProcessControl.monotonicMicroseconds())
        guard let symbol = dlsym(handle, "sp_plugin_create") else {
            // A Swift plugin built with the SDK carries its marker: tell its author the one line to add.
            throw dlsym(handle, "sp_swift_sdk_abi") != nil ? .missingSwiftExport(path) : .missingSymbol(path)
        }
        let create = unsafeBitCast(symbol, to: sp_plugin_create_fn.self)
        guard let plugin = create(host) else { throw .createFailed(path) }
        let abi = plugin.pointee.abi_version
        guard abi == UInt32(SP_ABI_VERSION) else { throw .abiMismatch(path, got: abi, want: UInt32(SP_ABI_VERSION)) }
        guard plugin.pointee.receive != nil else {
            throw WorkerError(code: .createFailed, message: "plugin library \(path) returned an sp_plugin without a receive function")
        }
        return plugin
    }
}
