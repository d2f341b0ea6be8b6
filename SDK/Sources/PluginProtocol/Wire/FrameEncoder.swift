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

    /// Appends `"error": {"code": ..., "message": ...}` with a code of the plugin's own;
    /// `started`: with `"data": {"started": true}` (SPEC §15).
    @inlinable
    public mutating func error(code: String, _ message: String, started: Bool = false) {
        appendKey("error")
        appendLiteral(#"{"code":"#)
        appendString(code)
        appendLiteral(#","message":"#)
        appendString(message)
        if started { appendLiteral(#","data":{"started":true}"#) }
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
