import ArgumentParser
import SupervisorKit
#if canImport(Glibc)
import Glibc
#endif

/// Options every client command shares: where the running supervisor is.
struct ClientOptions: ParsableArguments {
    @Option(help: "The supervisor's home folder (default: $SUPERVISOR_HOME or ~/.local/share/sandboxed-plugins).")
    var home: String?

    @Option(help: "The control socket (default: $SUPERVISOR_SOCKET, else <home>/supervisor.sock).")
    var socket: String?

    var socketPath: String { SupervisorConfig.socketPath(option: socket, home: home) }

    /// Runs one request and prints its result; errors go to stderr as `code: message`.
    func run(_ kind: MessageKind, _ fill: (inout FrameBuilder) -> Void = { _ in }, print format: (([UInt8]) -> String)? = nil) throws {
        let result: [UInt8]
        switch request(kind, fill) {
        case .success(let r): result = r
        case .failure(let failure):
            FileHandleLite.standardError.write("\(failure)\n")
            throw ExitCode(failure.isRemote ? 1 : 2)
        }
        let text = format?(result) ?? String(decoding: result, as: UTF8.self)
        if !text.isEmpty { print(text) }
    }

    private func request(_ kind: MessageKind, _ fill: (inout FrameBuilder) -> Void) -> Result<[UInt8], SupervisorClient.Failure> {
        do throws(SupervisorClient.Failure) {
            let client = try SupervisorClient(socketPath: socketPath)
            defer { client.close() }
            return .success(try client.request(kind, fill))
        } catch {
            return .failure(error)
        }
    }
}

extension SupervisorClient.Failure {
    var isRemote: Bool { if case .remote = self { return true } else { return false } }
}

enum FileHandleLite {
    case standardError
    func write(_ s: String) {
        _ = s.withCString { Glibc.write(2, $0, strlen($0)) }
    }
}

@_exported import PluginProtocol
