/// Bytes a frame parser reads from: the blocking readers' byte array, or the supervisor's NIO buffer.
public protocol FrameInput {
    /// Bytes available to read.
    var readableCount: Int { get }
    /// The byte at `offset` from the read position (offset < readableCount).
    func peek(at offset: Int) -> UInt8
    /// Moves the read position forward.
    mutating func skip(_ count: Int)
}

/// The one frame parser every reader uses (4-byte big-endian length, then the body): a state
/// machine in the manner of swift-nio-extras' length-field decoder. It refuses an empty frame and
/// one over the limit at the header, before buffering the body.
public struct FrameParser: Sendable {
    public enum State: Sendable, Equatable {
        case waitingForHeader
        case waitingForFrame(length: Int)
    }

    @usableFromInline var _state = State.waitingForHeader
    public var state: State { _state }
    public let maxBody: Int

    public init(maxBody: Int = Frame.defaultMaxBody) {
        self.maxBody = maxBody
    }

    /// The length of the next frame's body once all of it is readable in `input` (its header consumed,
    /// the body left for the caller to take), or nil when more bytes are needed. Throws when the next
    /// header is invalid; the stream is unusable after that.
    @inlinable
    public mutating func nextBody<Input: FrameInput>(in input: inout Input) throws(Frame.HeaderError) -> Int? {
        while true {
            switch _state {
            case .waitingForHeader:
                guard input.readableCount >= Frame.headerSize else { return nil }
                let length = try Frame.bodyLength(b0: input.peek(at: 0), b1: input.peek(at: 1), b2: input.peek(at: 2), b3: input.peek(at: 3),
                                                  limit: maxBody)
                input.skip(Frame.headerSize)
                _state = .waitingForFrame(length: length)
            case .waitingForFrame(let length):
                guard input.readableCount >= length else { return nil }
                _state = .waitingForHeader
                return length
            }
        }
    }
}

/// Splits a byte stream into frame bodies for the blocking readers (worker, CLI): a byte buffer fed
/// by `append`, read by `FrameParser`.
public struct FrameDecoder: Sendable {
    private var parser: FrameParser
    private var buffer = ByteAccumulator()

    public init(maxBody: Int = Frame.defaultMaxBody) {
        parser = FrameParser(maxBody: maxBody)
    }

    public var state: FrameParser.State { parser.state }
    public var maxBody: Int { parser.maxBody }

    /// Bytes buffered but not yet returned as frames.
    public var bufferedCount: Int { buffer.readableCount }

    public mutating func append(_ bytes: UnsafeRawBufferPointer) {
        buffer.append(bytes)
    }

    /// Reads straight into the buffer (no copy through a scratch array): `read` gets room for at
    /// least `atLeast` bytes and returns how many it wrote there (0 at the end of the stream, or
    /// negative: nothing), which this returns.
    public mutating func fill(atLeast: Int, _ read: (UnsafeMutableRawBufferPointer) throws -> Int) rethrows -> Int {
        try buffer.fill(atLeast: atLeast, read)
    }

    /// Calls `body` with the next complete frame's bytes, if there is one; returns what it returned.
    /// Throws when the next header is invalid; the stream is unusable after that.
    public mutating func next<R>(_ body: (UnsafeRawBufferPointer) throws -> R) throws -> R? {
        guard let length = try parser.nextBody(in: &buffer) else { return nil }
        return try buffer.take(length, body)
    }
}

/// A growable byte buffer with a read position, compacted as it is consumed. `bytes` is all
/// allocated room; what was written ends at `writeIndex`.
struct ByteAccumulator: FrameInput, Sendable {
    private var bytes: [UInt8] = []
    private var readIndex = 0
    private var writeIndex = 0

    var readableCount: Int { writeIndex - readIndex }
    func peek(at offset: Int) -> UInt8 { bytes[readIndex + offset] }
    mutating func skip(_ count: Int) { readIndex += count }

    /// Makes room for `count` more bytes after `writeIndex`: what was read goes first.
    private mutating func reserve(_ count: Int) {
        if readIndex > 0, readIndex == writeIndex {
            readIndex = 0
            writeIndex = 0
        } else if readIndex > 65536, readIndex * 2 > writeIndex {
            let live = writeIndex - readIndex
            let from = readIndex
            bytes.withUnsafeMutableBytes { all in
                guard let base = all.baseAddress else { return }
                base.copyMemory(from: base + from, byteCount: live)  // overlapping: a memmove
            }
            readIndex = 0
            writeIndex = live
        }
        if bytes.count - writeIndex < count {
            // A new array left unwritten, and one copy of what is held. Not zeroed: the room past
            // `writeIndex` is only ever written (by a read or a copy) before it is read, and zeroing
            // it touched every page of it at once (a 256 KiB read buffer was 64 page faults and
            // 256 KiB of memory in every worker's start, whether or not a large frame ever came).
            // Not grown by appending a repeated element either: that walks it generically, element
            // by element, which unoptimised and thread-sanitised builds take seconds over.
            let size = max(writeIndex + count, bytes.count * 2)
            var grown = [UInt8](unsafeUninitializedCapacity: size) { _, initialized in initialized = size }
            let held = writeIndex
            if held > 0 {
                grown.withUnsafeMutableBytes { to in bytes.withUnsafeBytes { from in to.copyMemory(from: UnsafeRawBufferPointer(rebasing: from[0..<held])) } }
            }
            bytes = grown
        }
    }

    mutating func append(_ more: UnsafeRawBufferPointer) {
        guard more.count > 0 else { return }
        reserve(more.count)
        let at = writeIndex
        bytes.withUnsafeMutableBytes { all in
            UnsafeMutableRawBufferPointer(rebasing: all[at..<(at + more.count)]).copyMemory(from: more)
        }
        writeIndex += more.count
    }

    mutating func fill(atLeast: Int, _ read: (UnsafeMutableRawBufferPointer) throws -> Int) rethrows -> Int {
        reserve(atLeast)
        let at = writeIndex
        let n = try bytes.withUnsafeMutableBytes { all in try read(UnsafeMutableRawBufferPointer(rebasing: all[at...])) }
        if n > 0 { writeIndex += n }
        return n
    }

    /// Calls `body` with the next `count` bytes and consumes them.
    mutating func take<R>(_ count: Int, _ body: (UnsafeRawBufferPointer) throws -> R) rethrows -> R {
        let start = readIndex
        readIndex += count
        return try bytes.withUnsafeBytes { all in try body(UnsafeRawBufferPointer(rebasing: all[start..<(start + count)])) }
    }
}
