import CPluginABI
import PluginProtocol
#if canImport(Glibc)
import Glibc
#endif

/// Raw bytes (SPEC §13, docs/abi.md "Bytes"): they travel without base64, in the message itself
/// up to 64 KiB and above that as a sealed memfd, which the supervisor passes on without reading
/// it. `Bytes` is `Codable`: a member of a method's parameters, of a call's parameters
/// (`context.call`), or what a call answers (`as: Bytes.self`); `api.bytes(name) { … }` exports a
/// method that answers with bytes. On the wire a value is `{"$bytes": <index>}` into the message's
/// attachments.
///
/// `Bytes(array)` copies an array into the memfd when it is sent; `Bytes(count:) { buffer in … }`
/// lets the method write its bytes straight into the memfd (no copy at all on the way to the
/// program that reads them). Received bytes above 64 KiB are read in place: `withUnsafeBytes`
/// maps the sealed memfd read-only (no copy).
public struct Bytes: Sendable {
    enum Storage: Sendable {
        case array([UInt8])
        /// A sealed memfd this value owns (`Owned` closes it).
        case memfd(Owned)
    }

    final class Owned: Sendable {
        let fd: Int32
        init(_ fd: Int32) { self.fd = fd }
        deinit { close(fd) }
    }

    let storage: Storage
    /// How many bytes there are.
    public let count: Int

    /// The bytes of `bytes` (copied into a memfd when they are sent, if there are more than 64 KiB).
    public init(_ bytes: [UInt8]) {
        storage = .array(bytes)
        count = bytes.count
    }

    /// `count` bytes the body writes into `buffer`: above 64 KiB straight into a memfd's shared
    /// mapping (sealed once the body returns), else into an array.
    public init(count: Int, initializingWith body: (UnsafeMutableRawBufferPointer) throws -> Void) throws {
        precondition(count >= 0, "a negative count of bytes")
        self.count = count
        guard count > Attachments.inlineLimit else {
            var bytes = [UInt8](repeating: 0, count: count)
            try bytes.withUnsafeMutableBytes { try body($0) }
            storage = .array(bytes)
            return
        }
        let fd = sp_bytes_writable(count)
        guard fd >= 0 else { throw PluginError(.pluginError, "cannot make a memfd for \(count) bytes: \(String(cString: strerror(-fd)))") }
        let owned = Owned(fd)
        guard let mapping = mmap(nil, count, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, fd, 0), mapping != MAP_FAILED else {
            throw PluginError(.pluginError, "cannot map a memfd of \(count) bytes: \(String(cString: strerror(errno)))")
        }
        do {
            try body(UnsafeMutableRawBufferPointer(start: mapping, count: count))
        } catch {
            munmap(mapping, count)
            throw error
        }
        // Unmapped before sealing: the kernel refuses F_SEAL_WRITE while a writable mapping exists.
        munmap(mapping, count)
        let rc = sp_bytes_seal(fd)
        guard rc == 0 else { throw PluginError(.pluginError, "cannot seal a memfd: \(String(cString: strerror(-rc)))") }
        storage = .memfd(owned)
    }

    /// A received memfd (the worker checked its seals and length), owned from now on.
    init(received fd: Int32, count: Int) {
        storage = .memfd(Owned(fd))
        self.count = count
    }

    /// The bytes, read in place: an array's own storage, or a memfd mapped read-only for the
    /// body's duration.
    public func withUnsafeBytes<R>(_ body: (UnsafeRawBufferPointer) throws -> R) throws -> R {
        switch storage {
        case .array(let array): return try array.withUnsafeBytes(body)
        case .memfd(let owned):
            guard count > 0 else { return try body(UnsafeRawBufferPointer(start: nil, count: 0)) }
            guard let mapping = mmap(nil, count, PROT_READ, MAP_SHARED, owned.fd, 0), mapping != MAP_FAILED else {
                throw PluginError(.pluginError, "cannot map \(count) received bytes: \(String(cString: strerror(errno)))")
            }
            defer { munmap(mapping, count) }
            return try body(UnsafeRawBufferPointer(start: mapping, count: count))
        }
    }

    /// A copy of the bytes as an array.
    public func array() throws -> [UInt8] {
        if case .array(let array) = storage { return array }
        return try withUnsafeBytes { Array($0) }
    }
}

extension Bytes: Codable {
    /// Where an encoder collects the `Bytes` it met, in order (`Coding.appendAttached`).
    static let collectorKey = CodingUserInfoKey(rawValue: "sandboxed-plugins.attachments")!

    enum Key: String, CodingKey { case bytes = "$bytes" }

    /// Writes `{"$bytes": i}` and attaches the bytes to the message being encoded; throws outside a
    /// call's params or a bytes method's answer, where nothing carries attachments.
    public func encode(to encoder: any Encoder) throws {
        guard let collector = encoder.userInfo[Self.collectorKey] as? Guarded<[Bytes]> else {
            throw EncodingError.invalidValue(self, EncodingError.Context(codingPath: encoder.codingPath, debugDescription:
                "Bytes travel in a call's parameters (context.call) or as the answer of a bytes method (api.bytes), not in another method's result"))
        }
        let index = collector.withLock { list in
            list.append(self)
            return list.count - 1
        }
        var container = encoder.container(keyedBy: Key.self)
        try container.encode(index, forKey: .bytes)
    }

    /// Reads `{"$bytes": i}`: the `i`th attachment of the message being decoded.
    public init(from decoder: any Decoder) throws {
        let container = try decoder.container(keyedBy: Key.self)
        let index = try container.decode(Int.self, forKey: .bytes)
        guard let list = PluginRuntime.attachments, list.indices.contains(index) else {
            throw DecodingError.dataCorruptedError(forKey: .bytes, in: container, debugDescription:
                "{\"$bytes\": \(index)} names bytes the message did not bring (it has \(PluginRuntime.attachments?.count ?? 0))")
        }
        self = list[index]
    }
}

/// A message's attachments, both ways (docs/abi.md "Bytes").
enum Attached {
    /// The bytes `env` lists, from its inline tail or the descriptors the worker put in (each now
    /// owned by its `Bytes`); nil when it lists none.
    static func read(_ env: Envelope, in bytes: UnsafeRawBufferPointer) -> [Bytes]? {
        guard let range = env.attachments, let list = try? Attachments.read(bytes, range) else { return nil }
        var offset = env.tail?.lowerBound ?? bytes.count
        return list.map { a in
            switch a.place {
            case .inline:
                let end = min(offset + a.length, bytes.count)
                defer { offset = end }
                return Bytes(Array(bytes[offset..<end]))
            case .descriptor(let fd) where fd >= 0:
                return Bytes(received: fd, count: a.length)
            default:
                return Bytes([])
            }
        }
    }

    /// Writes `list` as `frame`'s attachments: inline up to 64 KiB, else as a sealed memfd (made
    /// here from an array). Returns the inline bytes (the frame's tail) and the memfds made here,
    /// to keep open until the frame is sent.
    static func write(_ list: [Bytes], to frame: inout FrameBuilder) throws -> (tail: [UInt8], made: [Bytes.Owned]) {
        var tail: [UInt8] = []
        var made: [Bytes.Owned] = []
        var announced: [Attachment] = []
        for bytes in list {
            switch bytes.storage {
            case .array(let array) where array.count <= Attachments.inlineLimit:
                tail.append(contentsOf: array)
                announced.append(Attachment(length: array.count, place: .inline))
            case .array(let array):
                let fd = array.withUnsafeBytes { sp_bytes_create($0.baseAddress, $0.count) }
                guard fd >= 0 else { throw PluginError(.pluginError, "cannot make a memfd for \(array.count) bytes: \(String(cString: strerror(-fd)))") }
                made.append(Bytes.Owned(fd))
                announced.append(Attachment(length: array.count, place: .descriptor(fd)))
            case .memfd(let owned):
                announced.append(Attachment(length: bytes.count, place: .descriptor(owned.fd)))
            }
        }
        frame.attachments(announced)
        return (tail, made)
    }

    /// Why `host->send` refused a message with bytes (`rc`, a negative errno value).
    static func sendFailure(_ rc: Int32, count: Int) -> PluginError {
        rc == -EOPNOTSUPP
            ? PluginError(.unavailable, "bytes of more than 64 KiB travel as a memfd on the worker's payload channel, which this worker does not have")
            : PluginError(.pluginError, "cannot send \(count) bytes: \(String(cString: strerror(-rc)))")
    }
}

extension PluginAPI {
    /// Exports `name` answering with raw bytes (the result is `{"$bytes": 0}` with the bytes
    /// attached), on a task of its own.
    public func bytes<Params: MethodParameters>(_ name: String, _ body: @escaping @Sendable (Params) async throws -> Bytes) {
        register(name, .bytes { raw in
            try await body(try raw.withUnsafeBytesOrNil { try Coding.decode(Params.self, $0) })
        })
    }
}

extension PluginRuntime {
    /// Answers call `id` with `bytes` attached: inline up to 64 KiB, else as a sealed memfd (this
    /// process's copy closed once the worker has sent it on).
    func reply(_ id: UInt64, bytes: Bytes) {
        var b = FrameBuilder(kind: .reply, capacity: min(bytes.count, Attachments.inlineLimit) + 96)
        b.uint("id", id)
        b.raw("result", Array(#"{"$bytes":0}"#.utf8))
        let rc: Int32
        do {
            let (tail, made) = try Attached.write([bytes], to: &b)
            rc = tail.withUnsafeBytes { send(b.finish(tail: $0)) }
            withExtendedLifetime(made) {}
        } catch {
            return reply(id, error: error)
        }
        if rc != 0 { reply(id, error: Attached.sendFailure(rc, count: bytes.count)) }
    }
}
