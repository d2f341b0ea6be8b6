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
/// - `{"type":"chunk","id":I,"seq":S,"data":{"$bytes":0},"attachments":[{"length":N}]}`, then one
///   NUL and `N` raw bytes: an element of raw bytes (at most `Attachments.inlineLimit`), inline in
///   the chunk (docs/protocol.md "Bytes"): no JSON to scan or escape on the way.
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

    /// Whether a window of `current` chunks may grow by `n` and stay within `largestCredit`;
    /// safe for any `n` a peer sends (2^64 - 1 included: no addition that could overflow).
    public static func creditFits(_ current: Int, _ n: UInt64) -> Bool {
        current >= 0 && UInt64(current) <= largestCredit && n <= largestCredit - UInt64(current)
    }

    /// `current` grown by `n`, at most `largestCredit` (for a grant that is trusted, so clamped).
    public static func creditClamped(_ current: Int, _ n: UInt64) -> Int {
        Int(min(largestCredit, UInt64(max(0, current)) + min(n, largestCredit)))
    }

    /// Writes one chunk carrying `data` (raw JSON).
    @inlinable
    public static func chunk<Sink: FrameSink>(id: UInt64, seq: UInt64, data: UnsafeRawBufferPointer, input: Bool = false,
                                              into sink: consuming Sink) -> Sink {
        var frame = chunkHead(id: id, seq: seq, dataCount: data.count, input: input, into: consume sink)
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
        var frame = FrameEncoder(kind: .chunk, into: consume sink)
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
        var frame = FrameEncoder(kind: .chunk, into: consume sink)
        frame.uint("id", id)
        frame.flag("input")
        frame.uint("seq", count)
        frame.flag("end")
        return frame.finish()
    }

    /// Writes one chunk whose element is the raw `bytes` (inline, at most `Attachments.inlineLimit`).
    @inlinable
    public static func bytesChunk<Sink: FrameSink>(id: UInt64, seq: UInt64, bytes: UnsafeRawBufferPointer, input: Bool = false,
                                                   into sink: consuming Sink) -> Sink {
        var frame = bytesChunkHead(id: id, seq: seq, count: bytes.count, input: input, into: consume sink)
        frame.append(bytes: bytes)
        return frame
    }

    /// Writes a bytes chunk's length prefix, its JSON and the NUL that ends it, for a frame whose
    /// `count` raw bytes are written after it as they are (a relay passes them on without a copy).
    @inlinable
    public static func bytesChunkHead<Sink: FrameSink>(id: UInt64, seq: UInt64, count: Int, input: Bool = false,
                                                       into sink: consuming Sink) -> Sink {
        var frame = FrameEncoder(kind: .chunk, into: consume sink)
        frame.uint("id", id)
        if input { frame.flag("input") }
        frame.uint("seq", seq)
        frame.raw("data", bytesPlaceholder)
        frame.attachments([Attachment(length: count, place: .inline)])
        frame.sink.append(byte: UInt8(ascii: "}"))
        frame.sink.append(byte: 0)
        let body = frame.sink.writtenCount - frame.start - Frame.headerSize + count
        frame.sink.setLengthPrefix(UInt32(body), at: frame.start)
        return frame.sink
    }

    public static let bytesPlaceholder: [UInt8] = Array(#"{"$bytes":0}"#.utf8)

    /// Where a chunk's element is in `bytes`: its raw bytes (the inline tail) when it carries
    /// them, else its `data` (raw JSON); nil without either.
    @inlinable
    public static func element(of env: Envelope) -> (range: Range<Int>, isBytes: Bool)? {
        if env.attachments != nil, let tail = env.tail { return (tail, true) }
        return env.data.map { ($0, false) }
    }

    /// Why a chunk's attachments cannot be passed on: a chunk carries at most one element of
    /// bytes, inline, exactly as announced. Nil when they are fine (or it has none).
    public static func bytesProblem(of env: Envelope, in bytes: UnsafeRawBufferPointer) -> String? {
        guard let range = env.attachments else {
            return env.tail == nil ? nil : "data after the JSON object of a chunk without attachments"
        }
        let list: [Attachment]
        do { list = try Attachments.read(bytes, range) } catch { return "a chunk's attachments: \(error)" }
        guard list.count == 1, list[0].isInline else {
            return "a chunk carries one element of bytes, inline (at most \(Attachments.inlineLimit >> 10) KiB): \(list.count) attachments, \(list.filter { !$0.isInline }.count) of them descriptors"
        }
        guard list[0].length == env.tail?.count ?? 0 else {
            return "a chunk's attachment announces \(list[0].length) inline bytes and \(env.tail?.count ?? 0) came"
        }
        return nil
    }

    /// Writes a grant of `n` more chunks.
    @inlinable
    public static func credit<Sink: FrameSink>(id: UInt64, n: UInt64, input: Bool = false, into sink: consuming Sink) -> Sink {
        var frame = FrameEncoder(kind: .credit, into: consume sink)
        frame.uint("id", id)
        if input { frame.flag("input") }
        frame.uint("n", n)
        return frame.finish()
    }
}
