import LinuxSupport
import Logging
import NIOCore
import NIOPosix
import PluginProtocol
#if canImport(Glibc)
import Glibc
#endif

/// Frames from one worker's socket, into the supervisor.
final class WorkerHandler: ChannelInboundHandler {
    typealias InboundIn = ByteBuffer
    let supervisor: Supervisor
    let instance: WorkerInstance

    init(supervisor: Supervisor, instance: WorkerInstance) {
        self.supervisor = supervisor
        self.instance = instance
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        supervisor.workerFrame(instance, unwrapInboundIn(data))
    }

    func channelReadComplete(context: ChannelHandlerContext) {
        supervisor.flushDirty()
    }

    func channelInactive(context: ChannelHandlerContext) {
        supervisor.workerDisconnected(instance)
    }

    // No read back-pressure on workers: a worker that answers on its I/O thread blocks in send when
    // we stop reading, and then stops reading too. Instead `forward` refuses new requests for a
    // worker whose queue is full, which bounds what we buffer for it.

    func errorCaught(context: ChannelHandlerContext, error: any Error) {
        if let header = error as? Frame.HeaderError {
            supervisor.protocolViolation(instance, "\(header)")
        } else if error is ByteToMessageDecoderError {
            supervisor.protocolViolation(instance, "undecodable stream: \(error)")
        } else if error is ChannelError {
            // EOF and resets are reported through channelInactive.
        } else {
            supervisor.logger.warning("worker socket error: \(error)", metadata: ["plugin": "\(instance.identifier)"])
        }
        context.close(promise: nil)
    }
}

/// Requests from one CLI client on the control socket. Only the supervisor's own user (or root)
/// may talk to it: checked with SO_PEERCRED on connect. A client that sends nothing for
/// `idleTimeout` while nothing of it is in flight is dropped.
final class ControlHandler: ChannelInboundHandler, @unchecked Sendable {
    typealias InboundIn = ByteBuffer
    let supervisor: Supervisor
    let connection: ControlConnection
    static let idleTimeout = TimeAmount.seconds(10)
    var idleCheck: Scheduled<Void>?
    var lastRead = NIODeadline.now()

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
                        supervisor.logger.warning("refused a control connection from the worker of \(supervisor.workerName(pid: cred.pid)) (pid \(cred.pid))")
                        connection.closed = true
                        channel.close(promise: nil)
                    } else if cred.uid != me && cred.uid != 0 {
                        supervisor.logger.warning("refused a control client of uid \(cred.uid) (pid \(cred.pid)); only uid \(me) may connect")
                        connection.closed = true
                        channel.close(promise: nil)
                    }
                case .failure(let error):
                    supervisor.logger.warning("refused a control client: cannot read its credentials: \(error)")
                    connection.closed = true
                    channel.close(promise: nil)
                }
            }
        }
        scheduleIdleCheck(context.eventLoop, channel)
        context.fireChannelActive()
    }

    private func scheduleIdleCheck(_ loop: EventLoop, _ channel: Channel) {
        idleCheck = loop.scheduleTask(in: Self.idleTimeout) { [self] in
            if NIODeadline.now() - lastRead >= Self.idleTimeout, connection.outstanding == 0, !connection.closed {
                supervisor.logger.debug("dropping an idle control client")
                connection.closed = true
                channel.close(promise: nil)
            } else if !connection.closed {
                scheduleIdleCheck(loop, channel)
            }
        }
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        lastRead = .now()
        guard !connection.closed else { return }
        supervisor.controlFrame(connection, unwrapInboundIn(data))
    }

    func channelReadComplete(context: ChannelHandlerContext) {
        // Only whole frames count as activity: a client trickling half a frame is still idle.
        supervisor.flushDirty()
    }

    func channelInactive(context: ChannelHandlerContext) {
        connection.closed = true
        idleCheck?.cancel()
        // Whatever it was still waiting for is no longer wanted.
        let inFlight = connection.inFlight
        connection.inFlight = [:]
        supervisor.cancelInFlight(inFlight)
    }

    /// A client that does not read its replies is not read from either.
    func channelWritabilityChanged(context: ChannelHandlerContext) {
        context.channel.setOption(ChannelOptions.autoRead, value: context.channel.isWritable).whenFailure { _ in }
        if context.channel.isWritable { context.read() }
    }

    func errorCaught(context: ChannelHandlerContext, error: any Error) {
        if let header = error as? Frame.HeaderError {
            supervisor.dropClient(connection, ErrorBody(.protocolViolation, "\(header)"))
        } else {
            connection.closed = true
            context.close(promise: nil)
        }
    }
}

/// Captures a worker's stdout or stderr: lines are logged under the plugin's identifier, at most
/// `lineLimit` bytes a line and `linesPerSecond` lines a second (the rest are counted and dropped),
/// so a plugin can never corrupt the protocol nor flood the supervisor's log.
final class OutputCapture: ChannelInboundHandler {
    typealias InboundIn = ByteBuffer
    static let lineLimit = 4096
    static let linesPerSecond = 200

    let supervisor: Supervisor
    let plugin: String
    let stream: String
    var partial: [UInt8] = []
    var windowStart = NIODeadline.now()
    var linesInWindow = 0
    var dropped = 0

    init(supervisor: Supervisor, plugin: String, stream: String) {
        self.supervisor = supervisor
        self.plugin = plugin
        self.stream = stream
    }

    static func attach(fd: Int32, stream: String, plugin: String, supervisor: Supervisor) {
        NIOPipeBootstrap(group: supervisor.loop)
            .channelInitializer { channel in
                channel.eventLoop.makeCompletedFuture {
                    try channel.pipeline.syncOperations.addHandler(OutputCapture(supervisor: supervisor, plugin: plugin, stream: stream))
                }
            }
            .takingOwnershipOfDescriptor(input: fd)
            .whenFailure { error in
                close(fd)
                supervisor.logger.warning("cannot capture \(stream): \(error)", metadata: ["plugin": "\(plugin)"])
            }
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        var buffer = unwrapInboundIn(data)
        buffer.withUnsafeReadableBytes { bytes in
            var start = 0
            for i in 0..<bytes.count where bytes[i] == 0x0A {
                partial.append(contentsOf: bytes[start..<i])
                emit()
                start = i + 1
            }
            partial.append(contentsOf: bytes[start..<bytes.count])
            while partial.count >= Self.lineLimit {
                let rest = Array(partial[Self.lineLimit...])
                partial.removeSubrange(Self.lineLimit...)
                emit()
                partial = rest
            }
        }
        buffer.clear()
    }

    func channelInactive(context: ChannelHandlerContext) {
        if !partial.isEmpty { emit() }
        reportDropped()
    }

    func errorCaught(context: ChannelHandlerContext, error: any Error) {
        context.close(promise: nil)
    }

    private func emit() {
        defer { partial.removeAll(keepingCapacity: true) }
        let now = NIODeadline.now()
        if now - windowStart >= .seconds(1) {
            reportDropped()
            windowStart = now
            linesInWindow = 0
        }
        linesInWindow += 1
        if linesInWindow > Self.linesPerSecond {
            dropped += 1
            return
        }
        let text = String(decoding: partial, as: UTF8.self)
        supervisor.logger.info("\(stream): \(text)", metadata: ["plugin": "\(plugin)"])
    }

    private func reportDropped() {
        if dropped > 0 {
            supervisor.logger.warning("\(stream): dropped \(dropped) lines over \(Self.linesPerSecond)/s", metadata: ["plugin": "\(plugin)"])
            dropped = 0
        }
    }
}
