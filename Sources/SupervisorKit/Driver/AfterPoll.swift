import Glibc
import LinuxSupport
import Logging
import NIOCore
import NIOPosix

/// Runs a piece of work once the event loop has next polled its descriptors, beside what they
/// brought. A task scheduled on the loop cannot promise that: NIO runs every task that is due
/// before it polls again, those the tasks themselves scheduled included, so work that schedules
/// its next round a moment on, where a round and what it posts take longer than that moment, runs
/// round after round and reads no socket meanwhile (activations spawned a few a turn,
/// `SpawnPace`: 60 of them in 15 turns, no request read between the first and the last). A byte
/// written to a pipe the loop reads is seen only when the loop polls, with all else then ready.
///
/// On the loop only. The pipe is made at the first request and closed with the loop.
final class AfterPoll {
    private let loop: EventLoop
    private let work: () -> Void
    private let logger: Logger
    /// The pipe's end this side writes to; -1 before the first request, or once the loop closed it.
    private var writeEnd: Int32 = -1
    private var made = false
    private var warned = false
    /// The loop has closed (the pipe with it): nothing runs any more.
    private var loopClosed = false
    /// Asked, and not yet run.
    private(set) var isRequested = false

    init(loop: EventLoop, logger: Logger, work: @escaping () -> Void) {
        self.loop = loop
        self.logger = logger
        self.work = work
    }

    /// Runs the work after the loop's next poll (once, however often asked before it runs).
    func request() {
        loop.preconditionInEventLoop()
        guard !isRequested, !loopClosed else { return }
        isRequested = true
        if !made { made = true; makePipe() }
        var byte: UInt8 = 1
        // A full pipe holds a byte already: the read it brings runs the work.
        if writeEnd < 0 || (write(writeEnd, &byte, 1) < 0 && errno != EAGAIN) {
            // No pipe (no descriptor was left for it): a task a millisecond on, which runs the
            // work but, as said above, not always after a poll. The pipe is tried again next time.
            loop.assumeIsolated().scheduleTask(in: .milliseconds(1)) { [self] in fire() }
        }
    }

    private func fire() {
        guard isRequested else { return }
        isRequested = false
        work()
    }

    private func makePipe() {
        let readEnd: Int32
        do throws(SystemError) {
            (readEnd, writeEnd) = try ProcessControl.wakeUpPipe()
        } catch {
            made = false
            if !warned { logger.warning("cannot make a pipe for the event loop's turns (\(error)): timers stand in for it until one can be made") }
            warned = true
            return
        }
        let me = NIOLoopBound(self, eventLoop: loop)
        NIOPipeBootstrap(group: loop)
            .channelInitializer { channel in
                channel.eventLoop.makeCompletedFuture { try channel.pipeline.syncOperations.addHandler(Reader(owner: me.value)) }
            }
            .takingOwnershipOfDescriptor(input: readEnd)
            .assumeIsolated()
            .whenFailure { [self] error in
                // NIO closed the reading end with the channel it failed to register (its future
                // fails only after the channel exists): closed here too, it could close a
                // descriptor another thread has opened under the same number since.
                if writeEnd >= 0 { _ = Glibc.close(writeEnd) }
                writeEnd = -1
                logger.warning("cannot read a pipe for the event loop's turns (\(error)): timers stand in for it")
                if isRequested { isRequested = false; request() }
            }
    }

    /// The loop closed the pipe's reading end: it is shutting down (nothing else closes it; its
    /// writing end is closed only here, and its reading is never turned off).
    fileprivate func closed() {
        loopClosed = true
        isRequested = false
        if writeEnd >= 0 { _ = Glibc.close(writeEnd) }
        writeEnd = -1
    }

    private final class Reader: ChannelInboundHandler {
        typealias InboundIn = ByteBuffer
        private var owner: AfterPoll?

        init(owner: AfterPoll) { self.owner = owner }

        func channelRead(context: ChannelHandlerContext, data: NIOAny) { owner?.fire() }

        func channelInactive(context: ChannelHandlerContext) {
            owner?.closed()
            owner = nil
        }
    }
}
