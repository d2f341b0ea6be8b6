import NIOCore
import PluginProtocol
import SupervisorCore

/// Writes frames to channels and flushes each channel once per turn of the event loop: the first
/// write of a turn schedules the one flush, which runs after the turn's reads (every channel's read
/// batch) and timers, so a burst of routed frames costs one syscall per peer rather than one per
/// frame, and no code path has to remember to flush.
final class Outbox {
    private let loop: EventLoop
    private var dirty: [ObjectIdentifier: Channel] = [:]
    /// The set `flush` is flushing, kept empty between turns for its storage.
    private var flushing: [ObjectIdentifier: Channel] = [:]
    private var flushScheduled = false

    init(loop: EventLoop) {
        self.loop = loop
    }

    /// A frame encoder writing straight into a buffer of `channel`'s allocator: the bytes built are
    /// the bytes sent.
    func encoder(_ kind: MessageKind, for channel: Channel, capacity: Int = 128) -> FrameEncoder<ByteBuffer> {
        FrameEncoder(kind: kind, into: channel.allocator.buffer(capacity: capacity + 48))
    }

    /// Queues a finished frame on `channel`; flushed by `flush()`.
    func write(_ frame: ByteBuffer, to channel: Channel) {
        channel.write(frame, promise: nil)
        dirty[ObjectIdentifier(channel)] = channel
        if !flushScheduled {
            flushScheduled = true
            loop.assumeIsolated().execute { self.flush() }
        }
    }

    /// Queues a frame built elsewhere (e.g. by Codable) on `channel`.
    func write(_ frame: [UInt8], to channel: Channel) {
        var buffer = channel.allocator.buffer(capacity: frame.count)
        buffer.writeBytes(frame)
        write(buffer, to: channel)
    }

    /// A last frame, then the end: written and flushed now with whatever was queued for `channel`
    /// (the turn's flush would come after the close), then the channel is closed.
    func writeAndClose(_ frame: ByteBuffer, to channel: Channel) {
        dirty[ObjectIdentifier(channel)] = nil
        channel.writeAndFlush(frame, promise: nil)
        channel.close(promise: nil)
    }

    /// The one flush of a turn (scheduled by its first write).
    private func flush() {
        flushScheduled = false
        guard !dirty.isEmpty else { return }
        // Taken out before flushing: a flush can run handlers at once (a client's socket becomes
        // writable again, the handler reads, a request is routed and written), and what they write
        // goes into the other set, empty, with a flush of its own, instead of being wiped with this
        // one. The two sets trade places, so neither is allocated again on the next turn.
        swap(&flushing, &dirty)
        for channel in flushing.values { channel.flush() }
        flushing.removeAll(keepingCapacity: true)
    }

    /// Outbound buffering per channel before it counts as not writable (back-pressure).
    static let waterMark = ChannelOptions.Types.WriteBufferWaterMark(low: 256 * 1024, high: 4 * 1024 * 1024)
}

/// The encoder appends a byte or a few at a time: straight into the buffer's free room, not through
/// `writeInteger`/`writeBytes`, whose generic paths were ~10 % of the event loop's CPU per routed call
/// (`perf`, 64 calls in flight).
extension ByteBuffer: @retroactive FrameSink {
    @inlinable public var writtenCount: Int { writerIndex }
    @inlinable public mutating func append(byte: UInt8) {
        writeWithUnsafeMutableBytes(minimumWritableBytes: 1) { room in
            room[0] = byte
            return 1
        }
    }
    @inlinable public mutating func append(bytes: UnsafeRawBufferPointer) {
        guard let source = bytes.baseAddress, bytes.count > 0 else { return }
        writeWithUnsafeMutableBytes(minimumWritableBytes: bytes.count) { room in
            room.baseAddress!.copyMemory(from: source, byteCount: bytes.count)
            return bytes.count
        }
    }
    @inlinable public mutating func setLengthPrefix(_ length: UInt32, at offset: Int) { setInteger(length, at: offset) }
}

extension ByteBuffer: @retroactive FrameInput {
    @inlinable public var readableCount: Int { readableBytes }
    @inlinable public func peek(at offset: Int) -> UInt8 { getInteger(at: readerIndex + offset)! }
    @inlinable public mutating func skip(_ count: Int) { moveReaderIndex(forwardBy: count) }
}

extension Outbox {
    /// How much a socket's read takes at once: NIO's adaptive sizes, but up to 1 MiB instead of
    /// 64 KiB, so a large frame (a 64 KiB stream element with its JSON, inline bytes) is read in
    /// one `read` rather than cut across two and put together again in a copy (docs/benchmarks.md
    /// "Streams"). Buffers shrink back after small reads.
    static let receiveBuffers = AdaptiveRecvByteBufferAllocator(minimum: 64, initial: 2048, maximum: 1 << 20)
}

/// NIO's side of the protocol's frames: `FrameParser` over the channel's buffer, each body yielded
/// as a slice of it (no copy).
struct FrameCodec: ByteToMessageDecoder {
    typealias InboundOut = ByteBuffer
    var parser: FrameParser
    /// Where the bytes of a frame not yet whole go when the codec is taken out of its pipeline for
    /// an upgrade (Upgrade/Quiesce.swift); nil for a connection that is never handed over.
    let leftovers: Leftovers?
    /// Whether whole frames still in the buffer when the peer's end closes are acted on: a
    /// worker's are (its last reply or log before it died), a control client's are not (nobody
    /// would read their answers, and a call would run for no one).
    let readsPastTheEnd: Bool

    init(maxBody: Int, leftovers: Leftovers? = nil, readsPastTheEnd: Bool = true) {
        parser = FrameParser(maxBody: maxBody)
        self.leftovers = leftovers
        self.readsPastTheEnd = readsPastTheEnd
    }

    /// The name the codec has in a pipeline (an upgrade removes it by that name).
    static let handlerName = "frames"

    /// The bytes a codec held when it was removed: what the next binary reads first.
    final class Leftovers {
        /// Set just before the codec is removed: only then are the bytes it holds kept (at the
        /// end of a stream they are an incomplete frame, as always).
        var collecting = false
        var bytes: [UInt8] = []
        /// Of a frame not yet whole: the bytes that came (its length prefix counted), and its
        /// whole size once its length is known (0 when no frame is under way). For the idle
        /// check's words to a client that stopped halfway.
        var partial = (came: 0, of: 0)
    }

    mutating func decode(context: ChannelHandlerContext, buffer: inout ByteBuffer) throws -> DecodingState {
        guard let length = try parser.nextBody(in: &buffer) else {
            if let leftovers {
                if case .waitingForFrame(let body) = parser.state {
                    leftovers.partial = (4 + buffer.readableBytes, 4 + body)
                } else {
                    leftovers.partial = (buffer.readableBytes, 0)
                }
            }
            return .needMoreData
        }
        leftovers?.partial = (0, 0)
        context.fireChannelRead(wrapInboundOut(buffer.readSlice(length: length)!))
        return .continue
    }

    mutating func decodeLast(context: ChannelHandlerContext, buffer: inout ByteBuffer, seenEOF: Bool) throws -> DecodingState {
        // Taken out of the pipeline for an upgrade, every whole frame goes on; at the end of a
        // client's connection, none does.
        let handingOver = leftovers?.collecting ?? false
        guard readsPastTheEnd || handingOver else {
            buffer.moveReaderIndex(to: buffer.writerIndex)
            return .needMoreData
        }
        while try decode(context: context, buffer: &buffer) == .continue {}
        if let leftovers, leftovers.collecting, !seenEOF {
            // A frame whose header was read and whose body was not: its header goes first again
            // (the parser took it off the buffer), so that the next binary reads the frame whole.
            var header: [UInt8] = []
            if case .waitingForFrame(let length) = parser.state {
                header = [UInt8(truncatingIfNeeded: length >> 24), UInt8(truncatingIfNeeded: length >> 16),
                          UInt8(truncatingIfNeeded: length >> 8), UInt8(truncatingIfNeeded: length)]
            }
            leftovers.bytes = header + (buffer.readBytes(length: buffer.readableBytes) ?? [])
        }
        return .needMoreData
    }
}
