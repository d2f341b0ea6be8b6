import CPluginABI
import PluginProtocol

/// Why a worker could not bring its plugin up. Each case maps to an `exit` notice reason and an exit code.
struct WorkerError: Error, CustomStringConvertible {
    /// The reason the `exit` notice gives (one of the worker's own, ExitReason.workerExitCode != nil).
    typealias Code = ExitReason

    var code: Code
    var message: String

    static func loadError(_ path: String, _ detail: String) -> WorkerError {
        WorkerError(code: .loadError, message: "cannot load plugin library \(path): \(detail)")
    }

    static func missingSymbol(_ path: String) -> WorkerError {
        WorkerError(code: .missingSymbol,
                    message: "plugin library \(path) does not export sp_plugin_create; build it against sp_plugin.h (docs/abi.md)")
    }

    static func missingSwiftExport(_ path: String) -> WorkerError {
        WorkerError(code: .missingSymbol,
                    message: "plugin library \(path) is built with the Swift PluginSDK but does not export sp_plugin_create: add "
                        + "`@_cdecl(\"sp_plugin_create\") public func spPluginCreate(_ host: OpaquePointer?) -> OpaquePointer? "
                        + "{ PluginExport.create(YourPlugin.self, host: host) }` to it (docs/abi.md)")
    }

    static func abiMismatch(_ path: String, got: UInt32, want: UInt32) -> WorkerError {
        WorkerError(code: .abiMismatch,
                    message: "plugin library \(path) speaks ABI version \(got), this worker speaks \(want); rebuild the plugin against this sp_plugin.h")
    }

    static func createFailed(_ path: String) -> WorkerError {
        WorkerError(code: .createFailed, message: "sp_plugin_create in \(path) returned NULL: the plugin could not start. "
                        + "It is given an sp_host whose abi_version is \(SP_ABI_VERSION) and must return an sp_plugin that stays valid, "
                        + "with the same abi_version and a receive function (docs/abi.md); a Swift plugin's PluginExport.create "
                        + "returns NULL only when the host's abi_version differs from the SDK's")
    }

    /// Exit status of a worker that ends for this reason (sysexits-style, distinct from plugin exits).
    var exitCode: Int32 { code.workerExitCode ?? 1 }

    var description: String { message }
}
