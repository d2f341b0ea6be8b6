#if canImport(Glibc)
import Glibc
#endif
import LinuxSupport
import Logging
import NIOCore
import NIOPosix
import PluginProtocol
import SupervisorCore

/// Wires a freshly spawned worker's protocol socket into the event loop.
enum WorkerChannel {
    /// `leftover`: bytes of a frame the previous binary had read from it before an upgrade.
    static func connect(_ socket: consuming OwnedDescriptor, for instance: WorkerInstance, engine: Engine, leftover: [UInt8] = []) {
        // The channel is made on the engine's loop (its only one): the initializer runs there.
        let leftovers = FrameCodec.Leftovers()
        instance.frameLeftovers = leftovers
        let back = engine.handOff((engine: engine, instance: instance, leftovers: leftovers))
        let maxBody = engine.config.maxFrameBytes
        instance.socketFD = socket.raw
        ClientBootstrap(group: engine.loop)
            .channelOption(ChannelOptions.autoRead, value: true)
            .channelOption(ChannelOptions.writeBufferWaterMark, value: Outbox.waterMark)
            .channelOption(ChannelOptions.recvAllocator, value: Outbox.receiveBuffers)
            .channelInitializer { channel in
                channel.eventLoop.makeCompletedFuture {
                    try channel.pipeline.syncOperations.addHandler(ByteToMessageHandler(FrameCodec(maxBody: maxBody, leftovers: back.value.leftovers)),
                                                                   name: FrameCodec.handlerName)
                    try channel.pipeline.syncOperations.addHandler(WorkerHandler(engine: back.value.engine, instance: back.value.instance))
                }
            }
            .withConnectedSocket(socket.release())
            .assumeIsolated().whenComplete { result in
                switch result {
                case .success(let channel):
                    // A worker that ended before its socket was wired in (one whose plugin failed at
                    // once, on a loaded machine): what it wrote last, its exit notice, is read all the
                    // same, until the end of stream or its exit's finalizing closes it. One already
                    // finalized has nothing left to say.
                    if instance.phase == .finalized { return channel.close(promise: nil) }
                    instance.connection = .open(channel)
                    if instance.phase.hasExited { return }
                    if !leftover.isEmpty { Upgrade.feed(leftover, to: channel) }
                    // A worker taken over in an upgrade: its taken page, to read its marks again
                    // (asked before any call reaches it, so a call that blocks its I/O thread
                    // does not hold the answer back: one that waits for its turn to be asked,
                    // `PageAsks`, takes no call until then).
                    engine.router.askForTakenPage(instance)
                    // A worker taken over in an upgrade runs already: calls that came before its
                    // socket was wired in waited for this.
                    if instance.phase == .running, let record = engine.table.record(servedBy: instance) {
                        engine.router.forwardWaiting(record)
                    }
                    // A standby told to load before its socket was wired in.
                    engine.lifecycle.sendLoad(instance)
                case .failure(let error):
                    // NIO closes the descriptor once it has made a channel of it.
                    instance.connection = .closed
                    engine.lifecycle.kill(instance, .spawnError, "cannot watch the worker's socket: \(error)")
                }
            }
    }
}

/// Frames from one worker's socket, into the engine (the driver): one of its inputs.
final class WorkerHandler: ChannelInboundHandler {
    typealias InboundIn = ByteBuffer
    let engine: Engine
    let instance: WorkerInstance

    init(engine: Engine, instance: WorkerInstance) {
        self.engine = engine
        self.instance = instance
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        engine.workerFrame(instance, unwrapInboundIn(data))
    }

    func channelInactive(context: ChannelHandlerContext) {
        engine.lifecycle.workerDisconnected(instance)
    }

    // No read back-pressure on workers: a worker that answers on its I/O thread blocks in send when
    // we stop reading, and then stops reading too. Instead new requests for a worker whose queue is
    // full wait in its plugin's wait queue (`Route.mustWait`), bounded as any wait is, and go once
    // its socket has taken what was queued.
    func channelWritabilityChanged(context: ChannelHandlerContext) {
        if context.channel.isWritable, let record = engine.table.record(servedBy: instance) {
            engine.router.forwardWaiting(record)
            // What waited for this socket has gone out: its memory goes back once all is quiet.
            if record.waiting.isEmpty { engine.shared.trimMemoryWhenQuiet() }
        }
        context.fireChannelWritabilityChanged()
    }

    func errorCaught(context: ChannelHandlerContext, error: any Error) {
        if let header = error as? Frame.HeaderError {
            engine.lifecycle.protocolViolation(instance, "\(header)")
        } else if error is ByteToMessageDecoderError {
            engine.lifecycle.protocolViolation(instance, "undecodable stream: \(error)")
        } else if error is ChannelError || (error as? IOError)?.errnoCode == ECONNRESET {
            // EOF and resets are reported through channelInactive (a worker that dies with a frame
            // of ours unread resets its socket: its crash is logged once, by its exit's line).
        } else {
            engine.logger.warning("worker socket error: \(error)", metadata: ["plugin": "\(instance.identifier)"])
        }
        context.close(promise: nil)
    }
}

/// Captures a worker's stdout or stderr: lines are logged under the plugin's identifier, at most
/// `lineLimit` bytes a line and `linesPerSecond` lines a second (the rest are counted and dropped,
/// and once a second's are spent the pipe is read again only when the next second begins), so a
/// plugin can never corrupt the protocol, flood the supervisor's log nor spend its CPU.
final class OutputCapture: ChannelInboundHandler {
    typealias InboundIn = ByteBuffer
    static let lineLimit = 4096
    static let linesPerSecond = 200

    let logger: Logger
    let plugin: String
    let stream: String
    /// Where what is dropped is counted (`plugin_log_dropped_total`), on the loop.
    let shared: Handed<Shared>
    var partial: [UInt8] = []
    var window = RateWindow(limit: OutputCapture.linesPerSecond)
    /// Reading waits for the window's end (its rate is spent).
    var paused = false

    init(logger: Logger, plugin: String, stream: String, shared: Handed<Shared>) {
        self.logger = logger
        self.plugin = plugin
        self.stream = stream
        self.shared = shared
    }

    /// Returns the descriptor's number (NIO owns it now), for an upgrade to hand over.
    @discardableResult
    static func attach(_ descriptor: consuming OwnedDescriptor, stream: String, plugin: String, shared: Shared) -> Int32 {
        let fd = descriptor.release()
        let logger = shared.logger
        let handed = shared.handOff(shared)
        NIOPipeBootstrap(group: shared.loop)
            .channelInitializer { channel in
                channel.eventLoop.makeCompletedFuture {
                    try channel.pipeline.syncOperations.addHandler(OutputCapture(logger: logger, plugin: plugin, stream: stream, shared: handed))
                }
            }
            .takingOwnershipOfDescriptor(input: fd)
            .whenFailure { error in
                _ = OwnedDescriptor(fd)  // NIO did not take it: close it
                logger.warning("cannot capture \(stream): \(error)", metadata: ["plugin": "\(plugin)"])
            }
        return fd
    }

    /// A read's lines: found with `memchr`, and counted against the window with one reading of
    /// the clock for the whole read, so that a flood of short lines costs little more than reading
    /// it. A line whole in one read is logged from the read's own bytes; a longer or split one is
    /// gathered in `partial`.
    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        var buffer = unwrapInboundIn(data)
        let now = Instant.now
        buffer.withUnsafeReadableBytes { bytes in
            guard let base = bytes.baseAddress else { return }
            var start = 0
            while start < bytes.count, let found = memchr(base + start, 0x0A, bytes.count - start) {
                let end = base.distance(to: UnsafeRawPointer(found))
                if partial.isEmpty, end - start <= Self.lineLimit {
                    emit(UnsafeRawBufferPointer(rebasing: bytes[start..<end]), now: now)
                } else {
                    partial.append(contentsOf: bytes[start..<end])
                    // A long line is logged in pieces, its end with its newline (a line that ends
                    // exactly at a cut has nothing more to say).
                    if !emitPieces(now: now) || !partial.isEmpty { emitPartial(now: now) }
                }
                start = end + 1
            }
            partial.append(contentsOf: bytes[start..<bytes.count])
            emitPieces(now: now)
        }
        buffer.clear()
        // Past its rate, the rest of the second's output would be read only to be dropped: it
        // waits in the pipe instead, unread until the window ends, and a plugin that writes on
        // waits for room there, rather than costing the supervisor a core to throw away.
        if window.isDropping, !paused {
            paused = true
            let channel = context.channel
            channel.setOption(ChannelOptions.autoRead, value: false).whenFailure { _ in }
            context.eventLoop.assumeIsolated().scheduleTask(deadline: window.windowEnd.deadline) { [self] in
                // What the second dropped is said now, not only with the next line (which may never come).
                reportDropped(window.takeDroppedIfEnded(now: .now))
                paused = false
                channel.setOption(ChannelOptions.autoRead, value: true).whenFailure { _ in }
                channel.read()
            }
        }
    }

    /// Logs what is held in `lineLimit`-byte pieces, each cut before a character that a cut would
    /// split (UTF-8's continuation bytes), leaving the rest held; whether any was.
    @discardableResult
    private func emitPieces(now: Instant) -> Bool {
        var from = 0
        while partial.count - from >= Self.lineLimit {
            var cut = from + Self.lineLimit
            while cut > from + Self.lineLimit - 4, cut < partial.count, partial[cut] & 0xC0 == 0x80 { cut -= 1 }
            partial.withUnsafeBytes { emit(UnsafeRawBufferPointer(rebasing: $0[from..<cut]), now: now) }
            from = cut
        }
        partial.removeSubrange(0..<from)
        return from > 0
    }

    func channelInactive(context: ChannelHandlerContext) {
        if !partial.isEmpty { emitPartial(now: .now) }
        reportDropped(window.takeDropped())
    }

    func errorCaught(context: ChannelHandlerContext, error: any Error) {
        context.close(promise: nil)
    }

    private func emitPartial(now: Instant) {
        partial.withUnsafeBytes { emit($0, now: now) }
        partial.removeAll(keepingCapacity: true)
    }

    /// One line (or piece), if the window admits it: the text is made only then.
    private func emit(_ line: UnsafeRawBufferPointer, now: Instant) {
        let droppedBefore: Int
        switch window.admit(now: now) {
        case .admit(let before): droppedBefore = before
        case .drop(let before): return reportDropped(before)
        case .flood: return  // output has no flood limit
        }
        reportDropped(droppedBefore)
        logger.info("\(stream): \(LogText.shown(String(decoding: line, as: UTF8.self)))", metadata: ["plugin": "\(plugin)"])
    }

    private func reportDropped(_ dropped: Int) {
        if dropped > 0 {
            shared.value.metrics.logsDropped(plugin, source: stream, dropped)
            logger.warning("\(stream): dropped \(dropped) lines over \(Self.linesPerSecond)/s", metadata: ["plugin": "\(plugin)"])
        }
    }
}
