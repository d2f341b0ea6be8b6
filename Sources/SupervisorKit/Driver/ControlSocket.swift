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

/// The control socket's listener and its clients' handlers: where control requests come into the
/// engine (Driver/ControlRequests.swift takes them).
extension ControlServer {
    /// Binds the control socket, from the thread that runs the supervisor (it waits for the bind);
    /// the engine takes the listener with `listening(on:)`.
    /// `wait`: how the caller waits for the loop (the main thread of `supervisor start` serves the
    /// spawner meanwhile: the loop may need a child made).
    static func bind(config: SupervisorConfig, group: EventLoopGroup, engine: Handed<Engine>,
                     wait: (EventLoopFuture<Channel>) throws -> Channel = { try $0.wait() }) throws(SupervisorError) -> Channel {
        let path = config.socketPath
        // A Unix socket's path holds 107 bytes on Linux, but SwiftNIO, which serves it, takes 103 at
        // most (what macOS holds too): 104 to 107 would pass here and fail at the bind.
        let longest = min(MemoryLayout.size(ofValue: sockaddr_un().sun_path) - 1, 103)
        guard path.utf8.count <= longest else {
            throw .controlSocket(path, "the path is \(path.utf8.count) bytes long, and a Unix socket's path holds \(longest) at most: give a shorter --socket")
        }
        if let slash = path.lastIndex(of: "/"), slash != path.startIndex {
            let folder = String(path[..<slash])
            do { try FileSystem.makeDirectories(folder) } catch {
                throw .controlSocket(path, "cannot make its folder \(folder): \(error)")
            }
            guard FileSystem.isDirectory(folder) else { throw .controlSocket(path, "cannot make its folder \(folder): something that is not a folder is there") }
        }
        // We hold the home's lock, so a socket file left in the home is stale; one elsewhere may belong
        // to a supervisor with another home: refuse rather than take it over.
        if FileSystem.exists(path) {
            if let probe = try? BlockingConnection.connect(path: path) {
                probe.close()
                throw .controlSocket(path, "another supervisor is listening there; give this one another socket (--socket; a PluginHost's settings.socketPath)")
            }
            unlink(path)
        }
        let old = umask(0o077)
        defer { umask(old) }
        let server: Channel
        do {
            server = try wait(bootstrap(config: config, group: group, engine: engine).bind(unixDomainSocketPath: path))
        } catch let error as IOError {
            throw .controlSocket(path, String(cString: strerror(error.errnoCode)))
        } catch {
            throw .controlSocket(path, "\(error)")
        }
        chmod(path, 0o600)
        return server
    }

    /// Serves the listener the previous binary handed over in an upgrade (it never closed: a
    /// client connecting meanwhile waited in its backlog). It accepts nothing until `resume` has
    /// put the plugins back as the snapshot left them and turns reading on: a request taken
    /// before would find the table as `loadPlugins` made it (an `onCall` plugin `inactive` whose
    /// worker the snapshot hands over, an idle-stopped eager one `waiting`) and activate or queue
    /// against it.
    static func adopt(listener: Int32, config: SupervisorConfig, group: EventLoopGroup, engine: Handed<Engine>,
                      wait: (EventLoopFuture<Channel>) throws -> Channel) throws(SupervisorError) -> Channel {
        do {
            return try wait(bootstrap(config: config, group: group, engine: engine)
                .serverChannelOption(ChannelOptions.autoRead, value: false)
                .withBoundSocket(listener))
        } catch {
            throw .controlSocket(config.socketPath, "cannot take over the listener (descriptor \(listener)): \(error)")
        }
    }

    private static func bootstrap(config: SupervisorConfig, group: EventLoopGroup, engine: Handed<Engine>) -> ServerBootstrap {
        let maxBody = config.maxFrameBytes
        return ServerBootstrap(group: group)
            .serverChannelOption(ChannelOptions.backlog, value: 128)
            .serverChannelInitializer { AcceptBackoff.install(on: $0, logger: engine.value.logger, listener: "the control socket") }
            .childChannelOption(ChannelOptions.writeBufferWaterMark, value: Outbox.waterMark)
            .childChannelOption(ChannelOptions.recvAllocator, value: Outbox.receiveBuffers)
            .childChannelInitializer { channel in
                channel.eventLoop.makeCompletedFuture {
                    try Self.addHandlers(channel, connection: ControlConnection(channel: channel), maxBody: maxBody, engine: engine.value)
                }
            }
    }

    /// A client's pipeline: the frame codec (named, with its leftovers kept for an upgrade), then its handler.
    static func addHandlers(_ channel: Channel, connection: ControlConnection, maxBody: Int, engine: Engine) throws {
        try channel.pipeline.syncOperations.addHandler(ByteToMessageHandler(FrameCodec(maxBody: maxBody, leftovers: connection.leftovers, readsPastTheEnd: false)),
                                                       name: FrameCodec.handlerName)
        try channel.pipeline.syncOperations.addHandler(ControlHandler(engine: engine, connection: connection))
    }
}

/// Requests from one CLI client on the control socket. Only the supervisor's own user (or root)
/// may talk to it: checked with SO_PEERCRED on connect. A client that sends nothing for
/// `idleTimeout` while nothing of it is in flight or waits to be read (an answer queued for it, a
/// request held back until it reads), and that neither follows events nor provides host methods,
/// is dropped; so is one that lets more answers pile up unread than it may (`write`).
final class ControlHandler: ChannelDuplexHandler {
    typealias InboundIn = ByteBuffer
    typealias OutboundIn = ByteBuffer
    let engine: Engine
    let connection: ControlConnection
    static let idleTimeout = TimeAmount.seconds(10)
    /// What of a frame must come between two idle checks for its sender not to be idle.
    static let steadyBytes = 4096
    var idleCheck: Scheduled<Void>?
    /// The answers' bytes waiting to be written at the last idle check: fewer now means the
    /// client is reading them (slowly, perhaps), which is not idle.
    var unwrittenAtLastCheck = 0
    /// The bytes of a frame not yet whole at the last idle check.
    var partialAtLastCheck = 0

    init(engine: Engine, connection: ControlConnection) {
        self.engine = engine
        self.connection = connection
    }

    func channelActive(context: ChannelHandlerContext) {
        let channel = context.channel
        if let provider = channel as? SocketOptionProvider {
            let future: EventLoopFuture<PeerCredentials> = provider.unsafeGetSocketOption(
                level: SocketOptionLevel(SOL_SOCKET), name: SocketOptionName(PeerCredentials.socketOption))
            future.assumeIsolated().whenComplete { [engine, connection] result in
                switch result {
                case .success(let cred):
                    let me = geteuid()
                    if engine.isWorker(pid: cred.pid) {
                        // Workers run as our uid: without this a plugin could drive the supervisor.
                        let name = engine.table.worker(pid: cred.pid)?.identifier ?? "an install's preflight"
                        engine.logger.warning("refused a control connection from the worker of \(name) (pid \(cred.pid))")
                        Self.refuse(connection)
                        engine.metrics.controlClientDropped(reason: "refused")
                    } else if cred.uid != me && cred.uid != 0 {
                        engine.logger.warning("refused a control client of uid \(cred.uid) (pid \(cred.pid)); only uid \(me) may connect")
                        Self.refuse(connection)
                        engine.metrics.controlClientDropped(reason: "refused")
                    }
                case .failure(let error):
                    engine.logger.warning("refused a control client: cannot read its credentials: \(error)")
                    Self.refuse(connection)
                    engine.metrics.controlClientDropped(reason: "refused")
                }
            }
        }
        engine.control.opened(connection)
        // Room for its requests again after an answer (`ControlConnection.mostInFlight`).
        connection.onRoom = { [weak self, weak channel] in if let self, let channel { self.roomAgain(channel) } }
        // Accepted just as an upgrade began its handover: it waits, unread, like the others (while
        // the upgrade waits for quiet, it is read and its requests wait, as the others' do).
        if engine.isHandingOver { channel.setOption(ChannelOptions.autoRead, value: false).whenFailure { _ in } }
        scheduleIdleCheck(context.eventLoop, channel)
        context.fireChannelActive()
    }

    private static func refuse(_ connection: ControlConnection) {
        connection.closed = true
        connection.channel.close(promise: nil)
    }

    private func scheduleIdleCheck(_ loop: EventLoop, _ channel: Channel) {
        idleCheck = loop.assumeIsolated().scheduleTask(in: Self.idleTimeout) { [self] in
            let unwritten = (try? channel.syncOptions?.getOption(ChannelOptions.bufferedWritableBytes)) ?? 0
            if unwritten > 0, unwritten < unwrittenAtLastCheck { connection.lastActivity = .now() }
            unwrittenAtLastCheck = unwritten
            // A large frame coming slowly but steadily is not idle; one trickling a few bytes a
            // check (holding what came of it, up to a frame's limit) is.
            let partial = connection.leftovers.partial
            let steady = partial.came >= partialAtLastCheck + Self.steadyBytes
            if steady { connection.lastActivity = .now() }
            // Part of a frame at the last check too, and hardly more now: whatever else it does
            // (follows events, waits for answers), it stopped halfway.
            let stalled = partial.came > 0 && partialAtLastCheck > 0 && !steady
            partialAtLastCheck = partial.came
            let idle = NIODeadline.now() - connection.lastActivity >= Self.idleTimeout && connection.outstanding == 0 && unwritten == 0
                && connection.deferred.isEmpty && !connection.listens
            if !connection.closed, stalled || idle {
                if partial.came > 0 {
                    // Stopped halfway through a frame: told what came, as a bad frame is.
                    let came = partial.of > 0 ? "\(partial.came) of a frame's \(partial.of) bytes" : "\(partial.came) bytes of a frame's 4-byte length"
                    engine.control.drop(connection, ErrorBody(.protocolViolation, "\(came) came, then no more for \(Self.idleTimeout.nanoseconds / 1_000_000_000) s"))
                } else {
                    engine.logger.debug("dropping an idle control client")
                    Self.refuse(connection)
                    engine.metrics.controlClientDropped(reason: "idle")
                }
            } else if !connection.closed {
                scheduleIdleCheck(loop, channel)
            }
        }
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        // Only whole frames count as activity: a client trickling half a frame is still idle.
        connection.lastActivity = .now()
        guard !connection.closed else { return }
        let frame = unwrapInboundIn(data)
        let writable = context.channel.isWritable
        if connection.deferred.isEmpty, writable, connection.outstanding < ControlConnection.mostInFlight, !engine.upgradeHoldsReads {
            return engine.controlRequest(connection, frame)
        }
        // A client that does not read its answers is not served: all it sends waits. One with
        // `mostInFlight` requests waiting for answers, or any while an upgrade waits for quiet,
        // has its next requests wait, but not what its requests in flight need (a stream's chunks
        // and credit, a cancel, its replies to host calls and unlinks, link reports), unless that
        // is about a request that waits. Requests held when the upgrade hands over go to the next
        // binary with the connection, first in what it reads.
        let depth = engine.config.maxJSONDepth
        let heading = ControlConnection.heading(of: frame, maxDepth: depth)
        if writable, let kind = heading.kind {
            switch HeldRequests.verdict(kind, aboutHeld: heading.id.map(connection.heldRequests.contains) ?? false) {
            case .pass: return engine.controlRequest(connection, frame)
            case .withdraw: return connection.withdrawHeld(heading.id!, maxDepth: depth)
            case .hold: break
            }
        }
        connection.hold(frame, request: heading.request)
        // Reading goes on while it only waits for answers (what its requests in flight need must
        // be read), up to `heldLimit` of requests held; not while it does not read its answers.
        if !writable || connection.heldBytes > ControlConnection.heldLimit {
            context.channel.setOption(ChannelOptions.autoRead, value: false).whenFailure { _ in }
        }
    }


    func channelInactive(context: ChannelHandlerContext) {
        connection.closed = true
        connection.dropHeld()
        engine.control.gone(connection)
        idleCheck?.cancel()
        // Whatever it was still waiting for is no longer wanted.
        let inFlight = connection.inFlight
        connection.inFlight = [:]
        engine.shared.cancelInFlight(inFlight)
        // Its events stop; the host methods it provided fail their calls and fall back.
        engine.events.unfollow(connection)
        engine.hostMethods.providerGone(connection)
        engine.router.clientGone(connection)
    }

    /// Every answer passes here: one that would pile up past what a client may leave unread
    /// (`heldBytesLimit`: a stream's whole window at the largest chunks, which an honest reader may
    /// leave unread, SPEC §13, is never past it) ends the connection, rather than hold it in the
    /// supervisor's memory, as a server drops a client whose output buffer passes its hard limit.
    func write(context: ChannelHandlerContext, data: NIOAny, promise: EventLoopPromise<Void>?) {
        if !context.channel.isWritable, !connection.closed,
           let waiting = try? context.channel.syncOptions?.getOption(ChannelOptions.bufferedWritableBytes) {
            connection.framesUnwritable += 1
            // What it holds is its bytes and each frame's bookkeeping.
            let held = waiting + connection.framesUnwritable * ControlConnection.unreadFrameCost
            let limit = engine.config.heldBytesLimit
            if held > limit {
                engine.logger.warning("dropping a control client that does not read its answers: \(waiting >> 20) MiB in \(connection.framesUnwritable) frames wait for it (\(limit >> 20) MiB at most, \(ControlConnection.unreadFrameCost) bytes a frame counted besides its own: sixteen of the largest frames, 256 MiB at least)")
                engine.metrics.controlClientDropped(reason: "unread")
                connection.closed = true
                promise?.fail(ChannelError.ioOnClosedChannel)
                context.close(promise: nil)
                // What it held goes back to the system, not only to the allocator's free lists.
                engine.shared.janitor.trimMemory()
                return
            }
            // Counted until it has gone out (or failed with the connection).
            let counted = context.eventLoop.makePromise(of: Void.self)
            counted.futureResult.assumeIsolated().whenComplete { [connection] _ in connection.framesUnwritable -= 1 }
            if let promise { counted.futureResult.cascade(to: promise) }
            return context.write(data, promise: counted)
        }
        context.write(data, promise: promise)
    }

    /// A client that does not read its replies is not read from either.
    func channelWritabilityChanged(context: ChannelHandlerContext) {
        roomAgain(context.channel)
        // An events reader that fell behind hears what it missed as soon as there is room.
        if context.channel.isWritable { engine.events.roomAgain(for: connection) }
    }

    /// Serves what waited (not while an upgrade waits for quiet), and reads again (not once its
    /// handover began).
    private func roomAgain(_ channel: Channel) {
        if channel.isWritable { engine.serveDeferred(connection) }
        // Requests that still wait (`mostInFlight`, an upgrade's quiet) do not stop the reading:
        // what the ones in flight need must be read; past `heldLimit` of them, they do.
        let resume = channel.isWritable && !engine.isHandingOver && connection.heldBytes <= ControlConnection.heldLimit
        channel.setOption(ChannelOptions.autoRead, value: resume).whenFailure { _ in }
        if resume { channel.read() }
    }

    func errorCaught(context: ChannelHandlerContext, error: any Error) {
        if let header = error as? Frame.HeaderError {
            engine.control.drop(connection, ErrorBody(.protocolViolation, "\(header)"))
        } else {
            connection.closed = true
            context.close(promise: nil)
        }
    }
}

extension Engine {
    /// A client's requests that waited for room (`ControlConnection.deferred`), in order, for as
    /// long as there is room.
    func serveDeferred(_ connection: ControlConnection) {
        while !connection.closed, connection.channel.isWritable, !upgradeHoldsReads, let frame = connection.deferred.first {
            let request = ControlConnection.heading(of: frame, maxDepth: config.maxJSONDepth).request
            if request != nil, connection.outstanding >= ControlConnection.mostInFlight { return }
            _ = connection.takeHeld()
            if let request { connection.heldRequests.remove(request) }
            controlRequest(connection, frame)
        }
    }
}
