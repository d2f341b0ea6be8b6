import PluginProtocol

/// Bytes copied out of a message that must outlive it (the message's buffer is the worker's, valid
/// only while it is delivered): held in the value itself up to 64 bytes, else in an array. A
/// traceparent or a small answer then costs no heap allocation per call.
struct SmallBytes: Sendable {
    private typealias Words = (UInt64, UInt64, UInt64, UInt64, UInt64, UInt64, UInt64, UInt64)
    private enum Storage: Sendable {
        case inline(Words, count: Int)
        case heap([UInt8])
    }

    private let storage: Storage

    /// A copy of `bytes`.
    init(_ bytes: UnsafeRawBufferPointer) {
        var words: Words = (0, 0, 0, 0, 0, 0, 0, 0)
        guard bytes.count <= MemoryLayout<Words>.size else {
            storage = .heap(Array(bytes))
            return
        }
        withUnsafeMutableBytes(of: &words) { room in
            if let base = bytes.baseAddress { room.baseAddress!.copyMemory(from: base, byteCount: bytes.count) }
        }
        storage = .inline(words, count: bytes.count)
    }

    func withUnsafeBytes<R>(_ body: (UnsafeRawBufferPointer) throws -> R) rethrows -> R {
        switch storage {
        case .inline(var words, let count):
            return try Swift.withUnsafeBytes(of: &words) { try body(UnsafeRawBufferPointer(rebasing: $0[0..<count])) }
        case .heap(let bytes):
            return try bytes.withUnsafeBytes(body)
        }
    }
}

/// The `traceparent` of the request a task is handling, kept as the raw JSON value it came as
/// (quotes included) and written on, as it is, into the calls the task makes (SPEC §3). A W3C
/// traceparent is 57 bytes with its quotes: held inline (`SmallBytes`), where a task-local
/// `String` of it was a heap allocation on every call.
struct CarriedTrace: Sendable {
    private let json: SmallBytes

    /// The value of `range` in `bytes` (a message), or nil without one or if it is no JSON string
    /// (it is written on as it came, so only a string is carried).
    init?(_ bytes: UnsafeRawBufferPointer, _ range: Range<Int>?) {
        guard let range, range.count >= 2, bytes[range.lowerBound] == UInt8(ascii: "\""),
              bytes[range.upperBound - 1] == UInt8(ascii: "\"") else { return nil }
        json = SmallBytes(UnsafeRawBufferPointer(rebasing: bytes[range]))
    }

    /// Its raw JSON bytes, quotes included.
    func withJSON<R>(_ body: (UnsafeRawBufferPointer) throws -> R) rethrows -> R {
        try json.withUnsafeBytes(body)
    }

    /// The traceparent as text (what `PluginContext.traceparent` shows).
    var text: String? {
        withJSON { Envelope.string($0, 0..<$0.count) }
    }
}
