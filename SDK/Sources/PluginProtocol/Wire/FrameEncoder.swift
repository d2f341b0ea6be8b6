/// Where a frame is written: a byte array (the worker, the CLI) or, in the supervisor, the very
/// NIO buffer that is sent, so a routed frame is built once and never copied.
public protocol FrameSink {
    /// Bytes written so far.
    var writtenCount: Int { get }
    mutating func append(byte: UInt8)
    mutating func append(bytes: UnsafeRawBufferPointer)
    /// Overwrites 4 bytes at `offset` (the length prefix, once the body is complete).
    mutating func setLengthPrefix(_ length: UInt32, at offset: Int)
}

extension Array: FrameSink where Element == UInt8 {
    @inlinable public var writtenCount: Int { count }
    @inlinable public mutating func append(byte: UInt8) { append(byte) }
    @inlinable public mutating func append(bytes: UnsafeRawBufferPointer) { append(contentsOf: bytes) }
    @inlinable public mutating func setLengthPrefix(_ length: UInt32, at offset: Int) {
        // One write of four bytes (each subscript would check the storage is unique again).
        withUnsafeMutableBytes { $0.storeBytes(of: length.bigEndian, toByteOffset: offset, as: UInt32.self) }
    }
}

/// Builds one length-prefixed frame by appending JSON members, so a router can forward raw payload
/// bytes it never decoded. `finish()` patches the length prefix and hands back the sink.
public struct FrameEncoder<Sink: FrameSink> {
    @usableFromInline var sink: Sink
    @usableFromInline let start: Int
    @usableFromInline var first = true
    /// `finish` has closed the frame.
    @usableFromInline var finished = false

    /// Starts a frame holding `{"type":"<kind>"` at the end of `sink`.
    @inlinable
    public init(kind: MessageKind, into sink: consuming Sink) {
        // Taken, not copied: the encoder must hold the only reference to the sink's storage, or
        // its first append copies it (copy on write).
        start = sink.writtenCount
        self.sink = consume sink
        let opening = kind.openingMembers
        // The length prefix (written by `finish`) and the opening in one append: each append to an
        // array checks its storage, so the small pieces of a frame go in together (`FrameScratch`).
        var scratch = FrameScratch()
        scratch.skip(Frame.headerSize)
        scratch.add(opening)
        scratch.write(to: &self.sink)
        first = false
    }

    /// `,"key":` (no comma before the first member) into `scratch`; false for a key too long for it.
    @inlinable
    mutating func addKey(_ key: StaticString, to scratch: inout FrameScratch) -> Bool {
        guard key.utf8CodeUnitCount <= FrameScratch.capacity - 24 else { return false }
        if first { first = false } else { scratch.add(UInt8(ascii: ",")) }
        scratch.add(UInt8(ascii: "\""))
        scratch.add(key)
        scratch.add(UInt8(ascii: "\""))
        scratch.add(UInt8(ascii: ":"))
        return true
    }

    @inlinable
    mutating func appendKey(_ key: StaticString) {
        var scratch = FrameScratch()
        if addKey(key, to: &scratch) { return scratch.write(to: &sink) }
        if first { first = false } else { sink.append(byte: UInt8(ascii: ",")) }
        sink.append(byte: UInt8(ascii: "\""))
        sink.append(bytes: UnsafeRawBufferPointer(start: key.utf8Start, count: key.utf8CodeUnitCount))
        sink.append(byte: UInt8(ascii: "\""))
        sink.append(byte: UInt8(ascii: ":"))
    }

    @inlinable
    public mutating func uint(_ key: StaticString, _ value: UInt64) {
        var scratch = FrameScratch()
        guard addKey(key, to: &scratch) else {
            appendKey(key)
            return appendUInt(value)
        }
        scratch.add(value)
        scratch.write(to: &sink)
    }

    /// Appends `"key": true` (a flag: `stream`, `input`, `end`).
    @inlinable
    public mutating func flag(_ key: StaticString) {
        appendKey(key)
        appendLiteral("true")
    }

    /// Appends `"key": <value>`, negative or not.
    @inlinable
    public mutating func int(_ key: StaticString, _ value: Int) {
        appendKey(key)
        appendInt(value)
    }

    @inlinable
    mutating func appendUInt(_ value: UInt64) {
        var scratch = FrameScratch()
        scratch.add(value)
        scratch.write(to: &sink)
    }

    @inlinable
    mutating func appendInt(_ value: Int) {
        if value < 0 { sink.append(byte: UInt8(ascii: "-")) }
        appendUInt(UInt64(value.magnitude))
    }

    @inlinable
    public mutating func string(_ key: StaticString, _ value: String) {
        var scratch = FrameScratch()
        guard addKey(key, to: &scratch) else {
            appendKey(key)
            return appendString(value)
        }
        scratch.add(UInt8(ascii: "\""))
        scratch.write(to: &sink)
        JSONEscaping.append(value, to: &sink)
        sink.append(byte: UInt8(ascii: "\""))
    }

    /// Appends `"key": <raw>` where `raw` is already-valid JSON.
    @inlinable
    public mutating func raw(_ key: StaticString, _ raw: UnsafeRawBufferPointer) {
        appendKey(key)
        sink.append(bytes: raw)
    }

    @inlinable
    public mutating func raw(_ key: StaticString, _ raw: [UInt8]) {
        appendKey(key)
        raw.withUnsafeBytes { sink.append(bytes: $0) }
    }

    /// Appends `"key":` and the value `write` puts straight into the frame (a result encoded in
    /// place, without a buffer of its own). `write` must append exactly one valid JSON value.
    @inlinable
    public mutating func value<E: Error>(_ key: StaticString, _ write: (inout Sink) throws(E) -> Void) throws(E) {
        appendKey(key)
        try write(&sink)
    }

    /// Appends `"error": {"code": ..., "message": ...}`.
    @inlinable
    public mutating func error(_ code: ErrorCode, _ message: String) {
        error(code: code.rawValue, message)
    }

    /// Appends `"error": {"code": ..., "message": ...}` with a code of the plugin's own.
    @inlinable
    public mutating func error(code: String, _ message: String) {
        appendKey("error")
        appendLiteral(#"{"code":"#)
        appendString(code)
        appendLiteral(#","message":"#)
        appendString(message)
        sink.append(byte: UInt8(ascii: "}"))
    }

    /// Appends `"key": {...}`: a flat object of strings, string lists and integers (event
    /// payloads), escaped, its members in the order given.
    @inlinable
    public mutating func object(_ key: StaticString, _ members: KeyValuePairs<String, FlatJSON>) {
        appendKey(key)
        appendObject(members)
    }

    /// The same, with members made at run time (a literal reads better as `KeyValuePairs`).
    @inlinable
    public mutating func object(_ key: StaticString, members: [(key: String, value: FlatJSON)]) {
        appendKey(key)
        appendObject(members)
    }

    @inlinable
    mutating func appendObject<Members: Sequence>(_ members: Members) where Members.Element == (key: String, value: FlatJSON) {
        sink.append(byte: UInt8(ascii: "{"))
        var firstMember = true
        for (k, v) in members {
            if firstMember { firstMember = false } else { sink.append(byte: UInt8(ascii: ",")) }
            appendString(k)
            sink.append(byte: UInt8(ascii: ":"))
            switch v {
            case .string(let text): appendString(text)
            case .strings(let list): appendStrings(list)
            case .int(let number): appendInt(number)
            }
        }
        sink.append(byte: UInt8(ascii: "}"))
    }

    /// Appends `"key": ["...", ...]`, escaped.
    @inlinable
    public mutating func strings(_ key: StaticString, _ list: [String]) {
        appendKey(key)
        appendStrings(list)
    }

    @inlinable
    mutating func appendStrings(_ list: [String]) {
        sink.append(byte: UInt8(ascii: "["))
        for (i, text) in list.enumerated() {
            if i > 0 { sink.append(byte: UInt8(ascii: ",")) }
            appendString(text)
        }
        sink.append(byte: UInt8(ascii: "]"))
    }

    @inlinable
    mutating func appendLiteral(_ s: StaticString) {
        sink.append(bytes: UnsafeRawBufferPointer(start: s.utf8Start, count: s.utf8CodeUnitCount))
    }

    @inlinable
    mutating func appendString(_ s: String) {
        sink.append(byte: UInt8(ascii: "\""))
        JSONEscaping.append(s, to: &sink)
        sink.append(byte: UInt8(ascii: "\""))
    }

    /// Closes the object, writes one NUL and `tail` (the inline attachments' bytes, docs/protocol.md
    /// "Bytes") after it, writes the length prefix and returns the sink holding the whole frame.
    @inlinable
    public mutating func finish(tail: UnsafeRawBufferPointer) -> Sink {
        if !finished {
            sink.append(byte: UInt8(ascii: "}"))
            sink.append(byte: 0)
            sink.append(bytes: tail)
            closeFrame()
        }
        return sink
    }

    /// Closes the object, writes the length prefix and returns the sink holding the whole frame.
    /// Finishing again returns the same frame.
    ///
    /// `mutating`, not `consuming`: a consuming `finish` made its caller pass a copy of the
    /// encoder, so the closing brace's append found the storage shared and copied all of it, an
    /// allocation on every frame. Here the last writes happen while the encoder holds the only
    /// reference; the frame returned shares the storage until the encoder goes.
    @inlinable
    public mutating func finish() -> Sink {
        if !finished {
            sink.append(byte: UInt8(ascii: "}"))
            closeFrame()
        }
        return sink
    }

    @inlinable
    mutating func closeFrame() {
        sink.setLengthPrefix(UInt32(sink.writtenCount - start - Frame.headerSize), at: start)
        finished = true
    }
}

/// Up to 64 bytes of a frame assembled on the stack and appended to its sink at once (each append
/// to an array checks its storage again): `FrameEncoder`'s small pieces, `Frame.withHead`.
@usableFromInline
struct FrameScratch {
    @usableFromInline var bytes: (UInt64, UInt64, UInt64, UInt64, UInt64, UInt64, UInt64, UInt64) = (0, 0, 0, 0, 0, 0, 0, 0)
    @usableFromInline var count = 0
    @usableFromInline static var capacity: Int { 64 }

    @inlinable init() {}

    @inlinable mutating func skip(_ n: Int) { count += n }

    @inlinable mutating func add(_ byte: UInt8) {
        withUnsafeMutableBytes(of: &bytes) { $0[count] = byte }
        count += 1
    }

    @inlinable mutating func add(_ s: StaticString) {
        let n = s.utf8CodeUnitCount
        withUnsafeMutableBytes(of: &bytes) { $0.baseAddress!.advanced(by: count).copyMemory(from: s.utf8Start, byteCount: n) }
        count += n
    }

    /// `value`'s decimal digits (at most 20), two at a time (a 19-digit id is 10 divisions).
    @inlinable mutating func add(_ value: UInt64) {
        var digits: (UInt64, UInt64, UInt64) = (0, 0, 0)  // 24 bytes: room for 20 digits
        let pairs: StaticString = "00010203040506070809101112131415161718192021222324252627282930313233343536373839404142434445464748495051525354555657585960616263646566676869707172737475767778798081828384858687888990919293949596979899"
        let table = pairs.utf8Start
        var n = value
        var i = 24
        withUnsafeMutableBytes(of: &digits) { d in
            while n >= 100 {
                let r = Int(n % 100)
                n /= 100
                i -= 2
                d[i] = table[2 * r]
                d[i + 1] = table[2 * r + 1]
            }
            if n >= 10 {
                i -= 2
                d[i] = table[2 * Int(n)]
                d[i + 1] = table[2 * Int(n) + 1]
            } else {
                i -= 1
                d[i] = UInt8(truncatingIfNeeded: n) &+ 0x30
            }
            let length = 24 - i
            withUnsafeMutableBytes(of: &bytes) { $0.baseAddress!.advanced(by: count).copyMemory(from: d.baseAddress!.advanced(by: i), byteCount: length) }
            count += length
        }
    }

    @inlinable func write<S: FrameSink>(to sink: inout S) {
        withUnsafeBytes(of: bytes) { sink.append(bytes: UnsafeRawBufferPointer(rebasing: $0[0..<count])) }
    }
}

extension Frame {
    /// A frame's length prefix and `{"type":"<kind>","id":<id>` on the stack, for a frame whose body
    /// goes on with `restCount` bytes that are written after it (a reply passed on as its plugin
    /// wrote it after its id, with another id: the worker's peer links).
    @inlinable
    public static func withHead<R>(_ kind: MessageKind, id: UInt64, restCount: Int, _ body: (UnsafeRawBufferPointer) -> R) -> R {
        var scratch = FrameScratch()
        scratch.skip(headerSize)
        scratch.add(kind.openingMembers)
        scratch.add(#","id":"#)
        scratch.add(id)
        let length = UInt32(scratch.count - headerSize + restCount).bigEndian
        withUnsafeMutableBytes(of: &scratch.bytes) { $0.storeBytes(of: length, as: UInt32.self) }
        return withUnsafeBytes(of: scratch.bytes) { body(UnsafeRawBufferPointer(rebasing: $0[0..<scratch.count])) }
    }
}

extension FrameEncoder {
    /// Appends the members of an encoded JSON object, given without its braces (`"a":1,"b":2`), as
    /// they are (a host event's members after `type` and `id`).
    public mutating func members(_ raw: UnsafeRawBufferPointer) {
        guard raw.count > 0 else { return }
        if first { first = false } else { sink.append(byte: UInt8(ascii: ",")) }
        sink.append(bytes: raw)
    }

    /// What a forwarded `reply` carries of the reply `env` (in `bytes`): its raw `error` if it has
    /// one, else its raw `result`, else `"result": null`.
    public mutating func answer(of env: Envelope, in bytes: UnsafeRawBufferPointer) {
        if let e = env.error {
            raw("error", UnsafeRawBufferPointer(rebasing: bytes[e]))
        } else if let r = env.result {
            raw("result", UnsafeRawBufferPointer(rebasing: bytes[r]))
        } else {
            raw("result", Array("null".utf8))
        }
    }
}

/// A member value of `FrameEncoder.object`.
public enum FlatJSON: Sendable {
    case string(String)
    case strings([String])
    case int(Int)
}

/// The encoder most code uses: a frame in a fresh byte array.
public typealias FrameBuilder = FrameEncoder<[UInt8]>

extension FrameEncoder where Sink == [UInt8] {
    @inlinable
    public init(kind: MessageKind, capacity: Int = 128) {
        var bytes: [UInt8] = []
        bytes.reserveCapacity(capacity + 32)
        self.init(kind: kind, into: consume bytes)
    }
}

/// JSON string escaping.
public enum JSONEscaping {
    @inlinable
    public static func append<Sink: FrameSink>(_ s: String, to sink: inout Sink) {
        var s = s
        s.withUTF8 { utf8 in
            var runStart = 0
            for i in 0..<utf8.count {
                let c = utf8[i]
                guard c < 0x20 || c == UInt8(ascii: "\"") || c == UInt8(ascii: "\\") else { continue }
                if runStart < i { sink.append(bytes: UnsafeRawBufferPointer(rebasing: UnsafeRawBufferPointer(utf8)[runStart..<i])) }
                runStart = i + 1
                sink.append(byte: UInt8(ascii: "\\"))
                switch c {
                case UInt8(ascii: "\""), UInt8(ascii: "\\"): sink.append(byte: c)
                case 0x0A: sink.append(byte: UInt8(ascii: "n"))
                case 0x0D: sink.append(byte: UInt8(ascii: "r"))
                case 0x09: sink.append(byte: UInt8(ascii: "t"))
                default:
                    let hex: StaticString = "0123456789abcdef"
                    sink.append(byte: UInt8(ascii: "u"))
                    sink.append(byte: 0x30)
                    sink.append(byte: 0x30)
                    sink.append(byte: hex.utf8Start[Int(c >> 4)])
                    sink.append(byte: hex.utf8Start[Int(c & 0xF)])
                }
            }
            if runStart < utf8.count { sink.append(bytes: UnsafeRawBufferPointer(rebasing: UnsafeRawBufferPointer(utf8)[runStart...])) }
        }
    }

    /// `s` as a quoted JSON string.
    public static func quoted(_ s: String) -> [UInt8] {
        var out: [UInt8] = [UInt8(ascii: "\"")]
        append(s, to: &out)
        out.append(UInt8(ascii: "\""))
        return out
    }
}

extension Array where Element == UInt8 {
    /// Prepends a 4-byte big-endian length to a frame body.
    public static func frame(body: some Collection<UInt8>) -> [UInt8] {
        let n = UInt32(body.count)
        var out: [UInt8] = [UInt8(truncatingIfNeeded: n >> 24), UInt8(truncatingIfNeeded: n >> 16),
                            UInt8(truncatingIfNeeded: n >> 8), UInt8(truncatingIfNeeded: n)]
        out.append(contentsOf: body)
        return out
    }
}
