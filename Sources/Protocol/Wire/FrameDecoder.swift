

/// Splits a byte stream into frame bodies: 4-byte big-endian length, then the body.
/// A state machine in the manner of swift-nio-extras' length-field decoder; refuses an empty frame and
/// one over the limit before buffering its body.
public struct FrameDecoder: Sendable {
    public enum State: Sendable, Equatable {
        case waitingForHeader
        case waitingForFrame(length: Int)
    }

    public private(set) var state = State.waitingForHeader
    public let maxBody: Int
    private var buffer: [UInt8] = []
    private var readIndex = 0

    public init(maxBody: Int = Frame.defaultMaxBody) {
        self.maxBody = maxBody
    }

    /// Bytes buffered but not yet returned as frames.
    public var bufferedCount: Int { buffer.count - readIndex }

    public mutating func append(_ bytes: UnsafeRawBufferPointer) {
        if readIndex > 0, readIndex == buffer.count {
            buffer.removeAll(keepingCapacity: true)
            readIndex = 0
        } else if readIndex > 65536, readIndex * 2 > buffer.count {
            buffer.removeFirst(readIndex)
            readIndex = 0
        }
        buffer.append(contentsOf: bytes)
    }

    /// Calls `body` with the next complete frame's bytes, if there is one; returns whether it did.
    /// Throws when the next header is invalid; the stream is unusable after that.
    public mutating func next<R>(_ body: (UnsafeRawBufferPointer) throws -> R) throws -> R? {
        while true {
            switch state {
            case .waitingForHeader:
                guard buffer.count - readIndex >= Frame.headerSize else { return nil }
                let length = try Frame.bodyLength(
                    b0: buffer[readIndex], b1: buffer[readIndex + 1], b2: buffer[readIndex + 2], b3: buffer[readIndex + 3],
                    limit: maxBody)
                readIndex += Frame.headerSize
                state = .waitingForFrame(length: length)
            case .waitingForFrame(let length):
                guard buffer.count - readIndex >= length else { return nil }
                let start = readIndex
                readIndex += length
                state = .waitingForHeader
                return try buffer.withUnsafeBytes { all in
                    try body(UnsafeRawBufferPointer(rebasing: all[start..<(start + length)]))
                }
            }
        }
    }
}
