/// The frames of a stream (SPEC §13, docs/protocol.md "Streams"), written the same way by every
/// peer: the supervisor (into its NIO buffers), a worker's SDK, the client libraries.
///
/// - `{"type":"chunk","id":I,"seq":S,"data":D}`: element `S` (from 0) of the answer to call `I`,
///   from the callee; with `"input":true`, of the call's input, from the caller.
/// - `{"type":"chunk","id":I,"input":true,"seq":S,"end":true}`: the caller's input ends (`S`: how
///   many chunks it sent).
/// - `{"type":"credit","id":I,"n":N}`: the reader of the answer may take `N` more chunks; with
///   `"input":true`, the reader of the input (the callee).
///
/// An answer starts with `initialCredit` chunks of credit; an input with none: the callee grants
/// its first window (`initialCredit`) when it starts reading, so an input waits for its reader
/// rather than at the supervisor. A sender never sends more chunks than it was granted.
public enum StreamFrames {
    /// The credit every stream (answer and input alike) starts with, in chunks.
    public static let initialCredit = 16
    /// A reader grants credit again once it has taken this many chunks: the window stays between
    /// half and all of `initialCredit`, one `credit` frame per half window.
    public static let grantEvery = initialCredit / 2
    /// The most credit a sender may hold: a `credit` that would make more is a protocol violation
    /// (an unbounded window is no window).
    public static let largestCredit: UInt64 = 1 << 20

    /// Writes one chunk carrying `data` (raw JSON).
    @inlinable
    public static func chunk<Sink: FrameSink>(id: UInt64, seq: UInt64, data: UnsafeRawBufferPointer, input: Bool = false,
                                              into sink: consuming Sink) -> Sink {
        var frame = chunkHead(id: id, seq: seq, dataCount: data.count, input: input, into: sink)
        frame.append(bytes: data)
        chunkTail.withUnsafeBytes { frame.append(bytes: $0) }
        return frame
    }

    /// Writes a chunk's length prefix and every member up to `"data":`, for a frame whose `data`
    /// (`dataCount` bytes of raw JSON) is written after it as it is, then `chunkTail`: a relay
    /// passes a large element on without copying it into a new frame.
    @inlinable
    public static func chunkHead<Sink: FrameSink>(id: UInt64, seq: UInt64, dataCount: Int, input: Bool = false,
                                                  into sink: consuming Sink) -> Sink {
        var frame = FrameEncoder(kind: .chunk, into: sink)
        frame.uint("id", id)
        if input { frame.flag("input") }
        frame.uint("seq", seq)
        frame.appendKey("data")
        // The prefix covers what follows too: the data and the tail.
        let body = frame.sink.writtenCount - frame.start - Frame.headerSize + dataCount + chunkTail.count
        frame.sink.setLengthPrefix(UInt32(body), at: frame.start)
        return frame.sink
    }

    /// What follows a chunk's data after `chunkHead`.
    public static let chunkTail: [UInt8] = [UInt8(ascii: "}")]

    /// Writes the end of a call's input, after `count` chunks.
    @inlinable
    public static func inputEnd<Sink: FrameSink>(id: UInt64, count: UInt64, into sink: consuming Sink) -> Sink {
        var frame = FrameEncoder(kind: .chunk, into: sink)
        frame.uint("id", id)
        frame.flag("input")
        frame.uint("seq", count)
        frame.flag("end")
        return frame.finish()
    }

    /// Writes a grant of `n` more chunks.
    @inlinable
    public static func credit<Sink: FrameSink>(id: UInt64, n: UInt64, input: Bool = false, into sink: consuming Sink) -> Sink {
        var frame = FrameEncoder(kind: .credit, into: sink)
        frame.uint("id", id)
        if input { frame.flag("input") }
        frame.uint("n", n)
        return frame.finish()
    }
}
