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

    static func abiMismatch(_ path: String, got: UInt32, want: UInt32) -> WorkerError {
        WorkerError(code: .abiMismatch,
                    message: "plugin library \(path) speaks ABI version \(got), this worker speaks \(want); rebuild the plugin against this sp_plugin.h")
    }

    static func createFailed(_ path: String) -> WorkerError {
        WorkerError(code: .createFailed, message: "sp_plugin_create in \(path) returned NULL: the plugin could not start")
    }

    /// Exit status of a worker that ends for this reason (sysexits-style, distinct from plugin exits).
    var exitCode: Int32 { code.workerExitCode ?? 1 }

    var description: String { message }
}
