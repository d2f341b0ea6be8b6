import CPluginABI
import PluginProtocol
#if canImport(Glibc)
import Glibc
#endif

/// Raw bytes a method answers with (SPEC §13, docs/abi.md "Bytes"): they travel without base64,
/// in the message itself up to 64 KiB and above that as a sealed memfd, which the supervisor
/// passes on without reading it. `api.bytes(name) { … }` exports such a method.
///
/// `Bytes(array)` copies an array into the memfd when it is sent; `Bytes(count:) { buffer in … }`
/// lets the method write its bytes straight into the memfd (no copy at all on the way to the
/// program that reads them).
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
    public let count: Int

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
        let fd: Int32
        var made: Bytes.Owned?
        switch bytes.storage {
        case .array(let array) where array.count <= Attachments.inlineLimit:
            b.attachments([Attachment(length: array.count, place: .inline)])
            _ = array.withUnsafeBytes { send(b.finish(tail: $0)) }
            return
        case .array(let array):
            let created = array.withUnsafeBytes { sp_bytes_create($0.baseAddress, $0.count) }
            guard created >= 0 else {
                return reply(id, error: PluginError(.pluginError, "cannot make a memfd for \(array.count) bytes: \(String(cString: strerror(-created)))"))
            }
            made = Bytes.Owned(created)
            fd = created
        case .memfd(let owned):
            fd = owned.fd
        }
        b.attachments([Attachment(length: bytes.count, place: .descriptor(fd))])
        let rc = send(b.finish())
        withExtendedLifetime(made) {}
        if rc == -EOPNOTSUPP {
            reply(id, error: PluginError(.unavailable, "bytes of more than 64 KiB travel as a memfd on the worker's descriptor channel, which a worker without the sandbox does not have"))
        } else if rc != 0 {
            reply(id, error: PluginError(.pluginError, "cannot send \(bytes.count) bytes: \(String(cString: strerror(-rc)))"))
        }
    }
}
