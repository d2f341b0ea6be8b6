import CPluginABI
import PluginProtocol
#if canImport(Glibc)
import Glibc
#endif

/// Raw bytes a method answers with (SPEC §13, docs/abi.md "Bytes"): they travel without base64,
/// in the message itself up to 64 KiB and above that as a sealed memfd (`sp_bytes_create`), which
/// the supervisor passes on without reading it. `api.bytes(name) { … }` exports such a method.
public struct Bytes: Sendable {
    public let bytes: [UInt8]

    public init(_ bytes: [UInt8]) {
        self.bytes = bytes
    }

    public var count: Int { bytes.count }
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
    /// Answers call `id` with `bytes` attached: inline up to 64 KiB, else in a sealed memfd (this
    /// process's copy closed once the worker has sent it on).
    func reply(_ id: UInt64, bytes: Bytes) {
        var b = FrameBuilder(kind: .reply, capacity: min(bytes.count, Attachments.inlineLimit) + 96)
        b.uint("id", id)
        b.raw("result", Array(#"{"$bytes":0}"#.utf8))
        if bytes.count <= Attachments.inlineLimit {
            b.attachments([Attachment(length: bytes.count, place: .inline)])
            _ = bytes.bytes.withUnsafeBytes { send(b.finish(tail: $0)) }
            return
        }
        let fd = bytes.bytes.withUnsafeBytes { sp_bytes_create($0.baseAddress, $0.count) }
        guard fd >= 0 else {
            return reply(id, error: PluginError(.pluginError, "cannot make a memfd for \(bytes.count) bytes: \(String(cString: strerror(-fd)))"))
        }
        defer { close(fd) }
        b.attachments([Attachment(length: bytes.count, place: .descriptor(fd))])
        let rc = send(b.finish())
        if rc == -EOPNOTSUPP {
            reply(id, error: PluginError(.unavailable, "bytes of more than 64 KiB travel as a memfd on the worker's descriptor channel, which a worker without the sandbox does not have"))
        } else if rc != 0 {
            reply(id, error: PluginError(.pluginError, "cannot send \(bytes.count) bytes: \(String(cString: strerror(-rc)))"))
        }
    }
}
