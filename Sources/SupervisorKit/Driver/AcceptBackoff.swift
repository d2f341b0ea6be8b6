#if canImport(Glibc)
import Glibc
#endif
import LinuxSupport
import Logging
import NIOCore

/// A listener whose `accept` fails for want of resources (the process is out of descriptors:
/// EMFILE) stays readable, and NIO's server channel tries again at once: left so, the event loop
/// spins on `accept4` (thousands of failures a second, every other client and worker served a few
/// at a time). NIO's `AcceptBackoffHandler` delays only the next `read` asked for, which autoRead never
/// asks while the failed one is still pending; turning autoRead off ends the pending read and the
/// listener's readable interest. So: off for a short wait, then on again, and why in the log, at
/// most once a minute a listener.
final class AcceptBackoff: ChannelInboundHandler, RemovableChannelHandler {
    typealias InboundIn = Channel
    static let wait = TimeAmount.milliseconds(100)

    private let logger: Logger
    private let listener: String
    private var paused = false
    private var warnedAt: NIODeadline?

    init(logger: Logger, listener: String) {
        self.logger = logger
        self.listener = listener
    }

    /// For a `ServerBootstrap`'s `serverChannelInitializer`: `listener` names it in the log.
    static func install(on channel: Channel, logger: Logger, listener: String) -> EventLoopFuture<Void> {
        channel.eventLoop.makeCompletedFuture {
            try channel.pipeline.syncOperations.addHandler(AcceptBackoff(logger: logger, listener: listener))
        }
    }

    func errorCaught(context: ChannelHandlerContext, error: any Error) {
        guard let io = error as? IOError, [EMFILE, ENFILE, ENOBUFS, ENOMEM].contains(io.errnoCode) else {
            return context.fireErrorCaught(error)
        }
        let now = NIODeadline.now()
        if warnedAt.map({ now - $0 >= .seconds(60) }) ?? true {
            warnedAt = now
            let limit = ProcessControl.openFilesLimit(raisingTo: 0).soft
            let why = io.errnoCode == EMFILE || io.errnoCode == ENFILE
                ? " (this process may hold \(limit) descriptors: raise its open-files limit, or run fewer plugins)" : ""
            logger.warning("\(listener) cannot accept a connection: \(String(cString: strerror(io.errnoCode)))\(why); it tries again every \(Self.wait.nanoseconds / 1_000_000) ms")
        }
        guard !paused, let options = context.channel.syncOptions else { return }
        paused = true
        try? options.setOption(.autoRead, value: false)
        let loopBound = NIOLoopBound((self, context.channel), eventLoop: context.eventLoop)
        context.eventLoop.scheduleTask(in: Self.wait) {
            let (backoff, channel) = loopBound.value
            backoff.paused = false
            if channel.isActive { try? channel.syncOptions?.setOption(.autoRead, value: true) }
        }
    }
}
