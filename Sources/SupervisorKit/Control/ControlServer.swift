#if canImport(Glibc)
import Glibc
#endif
import IPC
import LinuxSupport
import Logging
import NIOCore
import NIOPosix
import PluginProtocol

/// The control socket the CLI talks to (`<home>/supervisor.sock`, mode 0600): one connection per
/// command; requests are in ControlRequests.swift.
final class ControlServer: SupervisorComponent, @unchecked Sendable {
    // @unchecked: `server` is set once before the loop serves anything and read only on the loop.
    unowned let supervisor: Supervisor
    private var server: Channel?

    init(_ supervisor: Supervisor) {
        self.supervisor = supervisor
    }

    func bind() throws(SupervisorError) {
        let path = config.socketPath
        if let slash = path.lastIndex(of: "/") {
            try? FileSystem.makeDirectories(String(path[..<slash]))
        }
        // We hold the home's lock, so a socket file left in the home is stale; one elsewhere may belong
        // to a supervisor with another home: refuse rather than take it over.
        if FileSystem.exists(path) {
            if let probe = try? BlockingConnection.connect(path: path) {
                probe.close()
                throw .controlSocket(path, "another supervisor is listening there; give this one another --socket")
            }
            unlink(path)
        }
        let old = umask(0o077)
        defer { umask(old) }
        let supervisor = self.supervisor
        let bootstrap = ServerBootstrap(group: supervisor.group)
            .serverChannelOption(ChannelOptions.backlog, value: 128)
            .childChannelOption(ChannelOptions.writeBufferWaterMark, value: Outbox.waterMark)
            .childChannelInitializer { channel in
                channel.eventLoop.makeCompletedFuture {
                    let connection = ControlConnection(channel: channel)
                    try channel.pipeline.syncOperations.addHandler(ByteToMessageHandler(FrameCodec(maxBody: supervisor.config.maxFrameBytes)))
                    try channel.pipeline.syncOperations.addHandler(ControlHandler(supervisor: supervisor, connection: connection))
                }
            }
        do {
            server = try bootstrap.bind(unixDomainSocketPath: path).wait()
        } catch {
            throw .controlSocket(path, "\(error)")
        }
        chmod(path, 0o600)
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

/// Requests from one CLI client on the control socket. Only the supervisor's own user (or root)
/// may talk to it: checked with SO_PEERCRED on connect. A client that sends nothing for
/// `idleTimeout` while nothing of it is in flight is dropped.
final class ControlHandler: ChannelInboundHandler, @unchecked Sendable {
    // @unchecked: a channel handler, used only on its channel's event loop (the supervisor's).
    typealias InboundIn = ByteBuffer
    let supervisor: Supervisor
    let connection: ControlConnection
    static let idleTimeout = TimeAmount.seconds(10)
    var idleCheck: Scheduled<Void>?

    init(supervisor: Supervisor, connection: ControlConnection) {
        self.supervisor = supervisor
        self.connection = connection
    }

    func channelActive(context: ChannelHandlerContext) {
        let channel = context.channel
        if let provider = channel as? SocketOptionProvider {
            let future: EventLoopFuture<PeerCredentials> = provider.unsafeGetSocketOption(
                level: SocketOptionLevel(SOL_SOCKET), name: SocketOptionName(PeerCredentials.socketOption))
            future.whenComplete { [supervisor, connection] result in
                switch result {
                case .success(let cred):
                    let me = geteuid()
                    if supervisor.isWorker(pid: cred.pid) {
                        // Workers run as our uid: without this a plugin could drive the supervisor.
                        let name = supervisor.table.worker(pid: cred.pid)?.identifier ?? "an install's preflight"
                        supervisor.logger.warning("refused a control connection from the worker of \(name) (pid \(cred.pid))")
                        Self.refuse(connection)
                    } else if cred.uid != me && cred.uid != 0 {
                        supervisor.logger.warning("refused a control client of uid \(cred.uid) (pid \(cred.pid)); only uid \(me) may connect")
                        Self.refuse(connection)
                    }
                case .failure(let error):
                    supervisor.logger.warning("refused a control client: cannot read its credentials: \(error)")
                    Self.refuse(connection)
                }
            }
        }
        scheduleIdleCheck(context.eventLoop, channel)
        context.fireChannelActive()
    }

    private static func refuse(_ connection: ControlConnection) {
        connection.closed = true
        connection.channel.close(promise: nil)
    }

    private func scheduleIdleCheck(_ loop: EventLoop, _ channel: Channel) {
        idleCheck = loop.scheduleTask(in: Self.idleTimeout) { [self] in
            if NIODeadline.now() - connection.lastActivity >= Self.idleTimeout, connection.outstanding == 0, !connection.closed {
                supervisor.logger.debug("dropping an idle control client")
                Self.refuse(connection)
            } else if !connection.closed {
                scheduleIdleCheck(loop, channel)
            }
        }
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        // Only whole frames count as activity: a client trickling half a frame is still idle.
        connection.lastActivity = .now()
        guard !connection.closed else { return }
        supervisor.control.request(connection, unwrapInboundIn(data))
    }

    func channelInactive(context: ChannelHandlerContext) {
        connection.closed = true
        idleCheck?.cancel()
        // Whatever it was still waiting for is no longer wanted.
        let inFlight = connection.inFlight
        connection.inFlight = [:]
        supervisor.router.cancelInFlight(inFlight)
    }

    /// A client that does not read its replies is not read from either.
    func channelWritabilityChanged(context: ChannelHandlerContext) {
        context.channel.setOption(ChannelOptions.autoRead, value: context.channel.isWritable).whenFailure { _ in }
        if context.channel.isWritable { context.read() }
    }

    func errorCaught(context: ChannelHandlerContext, error: any Error) {
        if let header = error as? Frame.HeaderError {
            supervisor.control.drop(connection, ErrorBody(.protocolViolation, "\(header)"))
        } else {
            connection.closed = true
            context.close(promise: nil)
        }
    }
}
