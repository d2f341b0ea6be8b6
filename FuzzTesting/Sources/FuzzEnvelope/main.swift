// Fuzzes the reading of one frame body: Envelope.parse (JSONScanner) and the Codable messages a
// worker sends (hello, log, exit, a reply's error), on the same bytes.
//
// When the envelope parses: every range it returned lies in the buffer and is one whole JSON value,
// its strings decode and survive JSONEscaping, a tighter depth limit never accepts more, and a reply
// built with FrameBuilder around its `id` and `result` (or `error`) parses back to the same bytes.
// When a message decodes, it encodes and decodes back to itself, and the encoding is an envelope of
// its own type.

#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif
import PluginProtocol

@_cdecl("LLVMFuzzerTestOneInput")
public func fuzz(_ start: UnsafeRawPointer, _ count: Int) -> CInt {
    let bytes = UnsafeRawBufferPointer(start: start, count: count)
    checkEnvelope(bytes)
    checkMessage(HelloMessage.self, bytes, kind: { $0.type })
    checkMessage(LogMessage.self, bytes, kind: { $0.type })
    checkMessage(ExitNotice.self, bytes, kind: { $0.type })
    checkMessage(ErrorBody.self, bytes, kind: { _ in nil })
    return 0
}

func checkEnvelope(_ bytes: UnsafeRawBufferPointer) {
    let shallow = try? Envelope.parse(bytes, maxDepth: 3)
    let env: Envelope
    do {
        env = try Envelope.parse(bytes, maxDepth: Frame.defaultMaxDepth)
    } catch {
        precondition(shallow == nil, "accepted at depth 3 but refused at depth \(Frame.defaultMaxDepth): \(error)")
        return
    }
    if let shallow { precondition(sameFields(shallow, env), "depth limit changed what was parsed") }

    // Every range lies in the buffer and is one complete JSON value.
    let ranges: [Range<Int>?] = [env.target, env.method, env.params, env.result, env.error, env.from, env.uri, env.name, env.payload,
                                 env.data, env.attachments]
    for case let range? in ranges {
        precondition(range.lowerBound >= 0 && range.upperBound <= bytes.count && !range.isEmpty,
                     "range \(range) outside a buffer of \(bytes.count) bytes")
        var scanner = JSONScanner(UnsafeRawBufferPointer(rebasing: bytes[range]))
        do { try scanner.validateValue() } catch { preconditionFailure("range \(range) is not one JSON value: \(error)") }
        if let s = Envelope.string(bytes, range) { checkEscaping(s) }
    }
    for range in [env.target, env.method, env.from, env.uri, env.name] {
        _ = Envelope.string(bytes, range)
    }
    if let name = env.typeName(in: bytes) {
        checkEscaping(name)
        precondition(env.kind == MessageKind(rawValue: name), "kind \(String(describing: env.kind)) for type '\(name)'")
    } else {
        precondition(env.kind == nil, "a kind without a type name")
    }
    precondition(!(env.badID && env.id != nil), "id both valid and bad")

    // Bytes (docs/protocol.md "Bytes"): the tail lies after the object's NUL, to the end; the
    // attachments, when they read, write back to a list that reads the same.
    if let tail = env.tail {
        precondition(tail.upperBound == bytes.count && tail.lowerBound >= 1 && bytes[tail.lowerBound - 1] == 0, "tail \(tail) not after a NUL")
    }
    if let range = env.attachments, let list = try? Attachments.read(bytes, range) {
        precondition(list.allSatisfy { $0.length >= 0 && (!$0.isInline || $0.length <= Attachments.inlineLimit) }, "an attachment out of bounds")
        var builder = FrameBuilder(kind: .reply)
        builder.attachments(list)
        let frame = builder.finish()
        frame.withUnsafeBytes { all in
            let body = UnsafeRawBufferPointer(rebasing: all[Frame.headerSize...])
            guard let again = try? Envelope.parse(body), let written = again.attachments else { preconditionFailure("written attachments do not parse") }
            precondition((try? Attachments.read(body, written)) == list, "attachments changed on the way back")
        }
    }

    // A reply built around this message's id and result (or error) parses back to the same values.
    guard let id = env.id else { return }
    for (member, range) in [("result", env.result), ("error", env.error)] {
        guard let range else { continue }
        var builder = FrameBuilder(kind: .reply, capacity: range.count + 32)
        builder.uint("id", id)
        let raw = UnsafeRawBufferPointer(rebasing: bytes[range])
        if member == "result" { builder.raw("result", raw) } else { builder.raw("error", raw) }
        let frame = builder.finish()
        checkFrameHeader(frame)
        frame.withUnsafeBytes { all in
            let body = UnsafeRawBufferPointer(rebasing: all[Frame.headerSize...])
            let reply: Envelope
            do { reply = try Envelope.parse(body) } catch { preconditionFailure("reply around \(member) does not parse: \(error)") }
            precondition(reply.kind == .reply && reply.typeName(in: body) == "reply", "reply's type is \(String(describing: reply.typeName(in: body)))")
            precondition(reply.id == id && !reply.badID, "reply's id \(String(describing: reply.id)), want \(id)")
            let back = member == "result" ? reply.result : reply.error
            precondition(back.map { body[$0].elementsEqual(raw) } == true, "reply's \(member) differs")
        }
    }

    // An error reply whose code and message are strings from the input decodes back to them.
    let code = Envelope.string(bytes, env.method) ?? env.typeName(in: bytes) ?? ""
    let message = Envelope.string(bytes, env.target) ?? Envelope.string(bytes, env.name) ?? ""
    var builder = FrameBuilder(kind: .reply)
    builder.uint("id", id)
    builder.error(code: code, message)
    let frame = builder.finish()
    checkFrameHeader(frame)
    frame.withUnsafeBytes { all in
        let body = UnsafeRawBufferPointer(rebasing: all[Frame.headerSize...])
        let reply: Envelope
        do { reply = try Envelope.parse(body) } catch { preconditionFailure("error reply does not parse: \(error)") }
        guard let range = reply.error else { preconditionFailure("error reply without error") }
        let decoded: ErrorBody
        do {
            decoded = try ProtocolJSON.decode(ErrorBody.self, from: UnsafeRawBufferPointer(rebasing: body[range]))
        } catch {
            preconditionFailure("error reply's error does not decode: \(error)")
        }
        precondition(decoded.code == code && decoded.message == message, "error reply decodes to \(decoded)")
    }
}

/// Fields two parses of the same bytes must agree on.
func sameFields(_ a: Envelope, _ b: Envelope) -> Bool {
    a.kind == b.kind && a.typeValue == b.typeValue && a.id == b.id && a.badID == b.badID
        && a.target == b.target && a.method == b.method && a.params == b.params && a.result == b.result
        && a.error == b.error && a.from == b.from && a.uri == b.uri && a.name == b.name
        && a.payload == b.payload && a.timeoutMs == b.timeoutMs
}

/// `s` quoted by JSONEscaping is one JSON string that decodes back to `s`.
func checkEscaping(_ s: String) {
    let quoted = JSONEscaping.quoted(s)
    quoted.withUnsafeBytes { q in
        var scanner = JSONScanner(q)
        do { try scanner.validateValue() } catch { preconditionFailure("JSONEscaping made invalid JSON of \(Array(s.utf8)): \(error)") }
        let back = JSONScanner.decodeString(q, 0..<q.count)
        precondition(back == s, "\(Array(s.utf8)) escaped and decoded is \(String(describing: back.map { Array($0.utf8) }))")
    }
}

func checkFrameHeader(_ frame: [UInt8]) {
    precondition(frame.count > Frame.headerSize)
    let length = Int(frame[0]) << 24 | Int(frame[1]) << 16 | Int(frame[2]) << 8 | Int(frame[3])
    precondition(length == frame.count - Frame.headerSize, "frame header says \(length), body is \(frame.count - Frame.headerSize)")
}

/// Decoding may fail; a decoded message encodes, decodes back to itself, and its encoding is an
/// envelope of its own type.
func checkMessage<T: Codable & Equatable>(_ type: T.Type, _ bytes: UnsafeRawBufferPointer, kind: (T) -> MessageKind?) {
    guard let message = try? ProtocolJSON.decode(type, from: bytes) else { return }
    let encoded: [UInt8]
    do { encoded = try ProtocolJSON.encode(message) } catch { preconditionFailure("\(T.self) decoded but does not encode: \(error)") }
    let again: T
    do { again = try ProtocolJSON.decode(type, from: encoded) } catch {
        preconditionFailure("\(T.self) encoding does not decode: \(error)")
    }
    precondition(again == message, "\(T.self) round trip changed \(message) to \(again)")
    encoded.withUnsafeBytes { e in
        let env: Envelope
        do { env = try Envelope.parse(e) } catch { preconditionFailure("\(T.self) encoding is not an envelope: \(error)") }
        if let k = kind(message) { precondition(env.kind == k, "\(T.self) encoding has kind \(String(describing: env.kind))") }
    }
}
