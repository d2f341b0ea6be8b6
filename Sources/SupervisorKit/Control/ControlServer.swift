#if canImport(Glibc)
import Glibc
#endif
import IPC
import LinuxSupport
import Logging
import NIOCore
import NIOPosix
import PluginProtocol
import SupervisorCore

/// The control socket the CLI talks to (`<home>/supervisor.sock`, mode 0600): one connection per
/// command; the engine takes its requests (Driver/ControlRequests.swift).
final class ControlServer: SupervisorComponent {
    let shared: Shared
    private(set) var server: Channel?
    /// The clients connected now (an upgrade hands them over).
    private(set) var connections: [ObjectIdentifier: ControlConnection] = [:]

    init(_ shared: Shared) {
        self.shared = shared
    }

    /// The listener `bind` made (closed by `close`).
    func listening(on server: Channel) {
        self.server = server
    }

    func opened(_ connection: ControlConnection) { connections[ObjectIdentifier(connection)] = connection }
    func gone(_ connection: ControlConnection) { connections[ObjectIdentifier(connection)] = nil }

    /// Tells a client why, then drops it.
    func drop(_ connection: ControlConnection, _ error: ErrorBody) {
        metrics.controlClientDropped(reason: error.code)
        logger.warning("dropping control client: \(error.message)")
        connection.closed = true
        outbox.writeAndClose(outbox.errorFrame(id: 0, error, for: connection.channel), to: connection.channel)
    }

    /// Stops listening and removes the socket file.
    func close() -> EventLoopFuture<Void> {
        let path = config.socketPath
        // Not served (an embedded host without its socket), or closed already: nothing to do.
        guard let server else { return loop.makeSucceededVoidFuture() }
        self.server = nil
        return server.close().always { _ in unlink(path) }
    }
}
