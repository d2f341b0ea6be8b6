import CLinuxSupport
import CPluginABI
import IPC
import LinuxSupport
import PluginProtocol
import Protocol
#if canImport(Glibc)
import Glibc
#endif

/// Bytes attached to an answer from the supervisor (SPEC §13, docs/protocol.md "Bytes"): inline
/// ones as they came in the frame, larger ones as a sealed memfd picked up by token at the
/// supervisor's handoff socket (`<control socket>.links`), checked before use.
public enum AttachedBytes: Sendable {
    case inline([UInt8])
    /// A sealed memfd of `length` bytes: the receiver's to map (`sp_bytes_map`) and close.
    case descriptor(Int32, length: Int)

    public var count: Int {
        switch self {
        case .inline(let bytes): return bytes.count
        case .descriptor(_, let length): return length
        }
    }

    /// Closes a descriptor (nothing for inline bytes).
    public func close() {
        if case .descriptor(let fd, _) = self { _ = Glibc.close(fd) }
    }

    /// Writes the bytes to `fd` (a file: the kernel copies a memfd's pages, `copy_file_range`,
    /// else `sendfile`).
    public func write(to out: Int32) throws(SystemError) {
        switch self {
        case .inline(let bytes):
            let failed: Int32 = bytes.withUnsafeBytes { raw in
                var done = 0
                while done < raw.count {
                    let n = Glibc.write(out, raw.baseAddress! + done, raw.count - done)
                    if n < 0 { if errno == EINTR { continue }; return errno }
                    done += n
                }
                return 0
            }
            if failed != 0 { throw SystemError(call: "write", errno: failed, context: "the output") }
        case .descriptor(let fd, let length):
            var offset: off_t = 0
            while Int(offset) < length {
                let n = sendfile(out, fd, &offset, length - Int(offset))
                if n < 0 { if errno == EINTR { continue }; throw SystemError(call: "sendfile", errno: errno, context: "the output") }
                if n == 0 { throw SystemError(call: "sendfile", errno: EIO, context: "the memfd ended early") }
            }
        }
    }

    /// The bytes, copied into an array (a descriptor's through a read-only mapping).
    public func copy() throws -> [UInt8] {
        switch self {
        case .inline(let bytes): return bytes
        case .descriptor(let fd, let length):
            guard let mapping = sp_bytes_map(fd, length) else { throw ErrorBody(.unavailable, "cannot map \(length) bytes: \(String(cString: strerror(errno)))") }
            defer { sp_bytes_unmap(mapping, length) }
            return Array(UnsafeRawBufferPointer(start: mapping, count: length))
        }
    }

    /// The attachment an answer's `result` names (`{"$bytes": i}`, else the first); the others
    /// are closed. `unavailable` when there is none.
    public static func pick(_ attached: [AttachedBytes], for result: [UInt8], of what: String) throws -> AttachedBytes {
        struct Placeholder: Decodable { var index: Int; enum CodingKeys: String, CodingKey { case index = "$bytes" } }
        let index = (try? ProtocolJSON.decode(Placeholder.self, from: result))?.index ?? 0
        for (i, other) in attached.enumerated() where i != index { other.close() }
        guard index >= 0, index < attached.count else {
            throw ErrorBody(.unavailable, "\(what) answered \(String(decoding: result.prefix(120), as: UTF8.self)) with no bytes attached")
        }
        return attached[index]
    }

    /// The attachments of the message `env` (over `bytes`), in order: inline ones sliced from its
    /// tail, tokens redeemed at `<socketPath>.links`. Throws `unavailable` when one cannot be
    /// taken (what was taken is closed).
    public static func collect(_ env: Envelope, _ bytes: UnsafeRawBufferPointer, socketPath: String) throws -> [AttachedBytes] {
        guard let range = env.attachments else { return [] }
        let list = try Attachments.read(bytes, range)
        var out: [AttachedBytes] = []
        var tail = env.tail?.lowerBound ?? bytes.count
        do {
            for a in list {
                switch a.place {
                case .inline:
                    guard tail + a.length <= bytes.count else { throw ErrorBody(.unavailable, "the answer's inline bytes are shorter than announced") }
                    out.append(.inline(Array(bytes[tail..<(tail + a.length)])))
                    tail += a.length
                case .token(let token):
                    out.append(.descriptor(try pickUp(token, length: a.length, at: socketPath + ".links"), length: a.length))
                case .descriptor:
                    throw ErrorBody(.unavailable, "an answer's attachment passed as a descriptor on the control socket, which carries none")
                }
            }
        } catch {
            for taken in out { taken.close() }
            throw error
        }
        return out
    }

    /// Redeems `token` at the handoff socket: the memfd, checked (sealed, `length` bytes).
    static func pickUp(_ token: String, length: Int, at path: String) throws -> Int32 {
        let fd = try Handoff.redeem(token, at: path, what: "the answer's bytes")
        // A received descriptor is checked before it is used: a sealed memfd of the length announced.
        let rc = sp_bytes_check(fd, UInt64(length))
        guard rc == 0 else {
            Glibc.close(fd)
            throw ErrorBody(.unavailable, "the answer's bytes are not a sealed memfd of \(length) bytes (\(String(cString: strerror(-rc))))")
        }
        return fd
    }
}

/// The supervisor's handoff socket (`<control socket>.links`): a one-time token in, the
/// descriptor it stands for out.
enum Handoff {
    /// Connects to `path`, sends `{"token": token}` and returns the descriptor that comes back,
    /// unchecked (the caller checks its kind). `unavailable`, saying what was not handed over, when
    /// none comes.
    static func redeem(_ token: String, at path: String, what: String) throws -> Int32 {
        let handoff = try BlockingConnection.connect(path: path)
        defer { handoff.close() }
        var limit = timeval(tv_sec: 2, tv_usec: 0)
        setsockopt(handoff.fd, SOL_SOCKET, SO_RCVTIMEO, &limit, socklen_t(MemoryLayout<timeval>.size))
        try handoff.sendFrame(ProtocolJSON.frame(["token": token]))
        var buffer = [UInt8](repeating: 0, count: 512)
        var fd: Int32 = -1
        let n = buffer.withUnsafeMutableBytes { cls_receive_with_fd(handoff.fd, $0.baseAddress, $0.count, &fd) }
        guard n > 4, fd >= 0 else {
            if fd >= 0 { Glibc.close(fd) }
            throw ErrorBody(.unavailable, "\(what) was not handed over: \(String(decoding: buffer.prefix(max(0, n)).dropFirst(4), as: UTF8.self))")
        }
        return fd
    }
}

extension SupervisorConnection {
    /// Sends a request and waits for its reply: its result and the bytes attached to it.
    public func requestWithBytes(_ kind: MessageKind, _ fill: (inout FrameBuilder) -> Void) throws(Failure) -> (result: [UInt8], bytes: [AttachedBytes]) {
        let reply = try requestFrame(kind, fill)
        let outcome: Result<(result: [UInt8], bytes: [AttachedBytes]), Failure> = reply.withUnsafeBytes { bytes in
            let env: Envelope
            do { env = try Envelope.parse(bytes) } catch { return .failure(.broken("\(error)")) }
            switch HostCoding.answer(of: env, in: bytes) {
            case .failure(let error): return .failure(.remote(error))
            case .success(let result):
                do { return .success((result, try AttachedBytes.collect(env, bytes, socketPath: socketPath))) } catch let error as ErrorBody {
                    return .failure(.remote(error))
                } catch {
                    return .failure(.broken("\(error)"))
                }
            }
        }
        return try outcome.get()
    }
}
