/// The routing-relevant top-level fields of one message, found by `JSONScanner` without decoding
/// payloads. Values are byte ranges into the message; `params`, `result`, `error` and `payload` are
/// forwarded as raw bytes.
public struct Envelope: Sendable {
    public var kind: MessageKind?
    /// Where the `type` member's value is: nothing but ranges and numbers here, so an envelope is
    /// copied as plain bytes (it is made and passed on for every frame).
    public var typeValue: Range<Int>?
    /// The `type` string as sent (`bytes`: the message), for error messages when it is not a known kind.
    public func typeName(in bytes: UnsafeRawBufferPointer) -> String? {
        kind?.rawValue ?? typeValue.flatMap { JSONScanner.decodeString(bytes, $0) }
    }

    /// Why a message with no known `kind` is refused: its `type` is missing, not a string, or
    /// names no message.
    public func unknownType(in bytes: UnsafeRawBufferPointer) -> String {
        guard let value = typeValue else { return "a message needs a \"type\"" }
        guard let name = JSONScanner.decodeString(bytes, value) else { return "the message's \"type\" is not a string" }
        return "unknown message type '\(name)'"
    }
    public var id: UInt64?
    /// Where the last `id` member's value is (the one `id` is read from).
    public var idValue: Range<Int>?
    /// True when an `id` member is present but is not an unsigned integer.
    public var badID = false
    public var target: Range<Int>?
    public var method: Range<Int>?
    public var params: Range<Int>?
    public var result: Range<Int>?
    public var error: Range<Int>?
    public var from: Range<Int>?
    public var uri: Range<Int>?
    public var name: Range<Int>?
    public var payload: Range<Int>?
    public var timeoutMs: UInt64?
    /// True when a `timeoutMs` member is present but is not an unsigned integer (nor null).
    public var badTimeout = false
    /// A W3C trace context (`call`, `open`).
    public var traceparent: Range<Int>?
    /// Streams (docs/protocol.md "Streams"): a `call`'s `"stream": true` (answer with chunks) and
    /// `"input": true` (input chunks follow); a `chunk`'s `seq`, `data` and `"end": true`; a
    /// `credit`'s `n`. The flags are true only for the literal `true`.
    public var stream = false
    public var input = false
    public var end = false
    public var seq: UInt64?
    public var data: Range<Int>?
    public var n: UInt64?
    /// Bytes (docs/protocol.md "Bytes"): the `attachments` array, and the bytes after the JSON's
    /// NUL (the inline attachments, in order).
    public var attachments: Range<Int>?
    public var tail: Range<Int>?
    /// A call a program sends again after the direct link it was in flight on ended with its
    /// worker (SPEC §15): `{"link": N, "id": X}`, decoded as `AfterLink`.
    public var afterLink: Range<Int>?

    public init() {}

    /// Scans `bytes` (one frame body) and collects the known members.
    /// Throws when the frame is not one well-formed JSON object within `maxDepth`.
    public static func parse(_ bytes: UnsafeRawBufferPointer, maxDepth: Int = Frame.defaultMaxDepth) throws(JSONScanner.Failure) -> Envelope {
        var env = Envelope()
        var scanner = JSONScanner(bytes, maxDepth: maxDepth)
        try scanner.scanObject { (key, value) throws(JSONScanner.Failure) in
            switch key.count {
            case 1 where bytes[key.lowerBound] == UInt8(ascii: "n"): env.n = JSONScanner.decodeUInt(bytes, value)
            case 2 where Self.matches(bytes, key, "id"):
                env.id = JSONScanner.decodeUInt(bytes, value)
                env.idValue = value
                env.badID = env.id == nil
            case 3 where Self.matches(bytes, key, "uri"): env.uri = value
            case 3 where Self.matches(bytes, key, "seq"): env.seq = JSONScanner.decodeUInt(bytes, value)
            case 3 where Self.matches(bytes, key, "end"): env.end = Self.isTrue(bytes, value)
            case 4 where Self.matches(bytes, key, "type"):
                env.typeValue = value
                env.kind = Self.commonKind(bytes, value) ?? JSONScanner.decodeString(bytes, value).flatMap(MessageKind.init(rawValue:))
            case 4 where Self.matches(bytes, key, "from"): env.from = value
            case 4 where Self.matches(bytes, key, "name"): env.name = value
            case 4 where Self.matches(bytes, key, "data"): env.data = value
            case 5 where Self.matches(bytes, key, "error"): env.error = value
            case 5 where Self.matches(bytes, key, "input"): env.input = Self.isTrue(bytes, value)
            case 6 where Self.matches(bytes, key, "target"): env.target = value
            case 6 where Self.matches(bytes, key, "method"): env.method = value
            case 6 where Self.matches(bytes, key, "params"): env.params = value
            case 6 where Self.matches(bytes, key, "result"): env.result = value
            case 6 where Self.matches(bytes, key, "stream"): env.stream = Self.isTrue(bytes, value)
            case 7 where Self.matches(bytes, key, "payload"): env.payload = value
            case 9 where Self.matches(bytes, key, "timeoutMs"):
                env.timeoutMs = JSONScanner.decodeUInt(bytes, value)
                env.badTimeout = env.timeoutMs == nil && !(value.count == 4 && Self.matches(bytes, value, "null"))
            case 9 where Self.matches(bytes, key, "afterLink"): env.afterLink = value
            case 11 where Self.matches(bytes, key, "traceparent"): env.traceparent = value
            case 11 where Self.matches(bytes, key, "attachments"): env.attachments = value
            default: break
            }
        }
        if let start = scanner.tailStart { env.tail = start..<bytes.count }
        return env
    }

    /// The kinds of a call's path (`call`, `reply`, `cancel`, `chunk`, `credit`, `event`, `log`),
    /// told from the quoted value's bytes without making a String; nil for any other (escapes
    /// included), which the caller decodes.
    @inline(__always)
    static func commonKind(_ bytes: UnsafeRawBufferPointer, _ value: Range<Int>) -> MessageKind? {
        switch value.count {
        case 5 where matches(bytes, value, "\"log\""): return .log
        case 6 where matches(bytes, value, "\"call\""): return .call
        case 7 where matches(bytes, value, "\"reply\""): return .reply
        case 7 where matches(bytes, value, "\"chunk\""): return .chunk
        case 7 where matches(bytes, value, "\"event\""): return .event
        case 8 where matches(bytes, value, "\"cancel\""): return .cancel
        case 8 where matches(bytes, value, "\"credit\""): return .credit
        default: return nil
        }
    }

    @usableFromInline @inline(__always)
    static func matches(_ bytes: UnsafeRawBufferPointer, _ key: Range<Int>, _ word: StaticString) -> Bool {
        let w = word.utf8Start
        var i = 0
        for k in key {
            if bytes[k] != w[i] { return false }
            i += 1
        }
        return true
    }

    /// Whether the value at `value` is the literal `true`.
    @inline(__always)
    static func isTrue(_ bytes: UnsafeRawBufferPointer, _ value: Range<Int>) -> Bool {
        value.count == 4 && bytes[value.lowerBound] == UInt8(ascii: "t")
    }

    /// Decodes the string at `range` of `bytes`, or nil when absent or not a string.
    public static func string(_ bytes: UnsafeRawBufferPointer, _ range: Range<Int>?) -> String? {
        guard let range else { return nil }
        return JSONScanner.decodeString(bytes, range)
    }
}
