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
    /// Bytes carried in the message itself (at most 64 KiB).
    case inline([UInt8])
    /// A sealed memfd of `length` bytes: the receiver's to map (`sp_bytes_map`) and close.
    case descriptor(Int32, length: Int)

    /// How many bytes there are.
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

extension AttachedBytes {
    /// `bytes` to send with a call: inline up to 64 KiB, else copied once into a sealed memfd.
    public static func from(_ bytes: [UInt8]) throws -> AttachedBytes {
        guard bytes.count > Attachments.inlineLimit else { return .inline(bytes) }
        let fd = bytes.withUnsafeBytes { sp_bytes_create($0.baseAddress, $0.count) }
        guard fd >= 0 else { throw ErrorBody(.unavailable, "cannot make a memfd for \(bytes.count) bytes: \(String(cString: strerror(-fd)))") }
        return .descriptor(fd, length: bytes.count)
    }

    /// The bytes of the file at `path`, to send with a call: inline up to 64 KiB, else a sealed
    /// memfd the kernel fills from the file (`copy_file_range`, or `sendfile` where the kernel
    /// refuses a copy across file systems: no copy through this process).
    public static func file(_ path: String) throws -> AttachedBytes {
        let input = Glibc.open(path, O_RDONLY | O_CLOEXEC)
        guard input >= 0 else { throw ErrorBody(.badRequest, "cannot read \(path): \(String(cString: strerror(errno)))") }
        defer { Glibc.close(input) }
        var st = stat()
        guard fstat(input, &st) == 0, (st.st_mode & S_IFMT) == S_IFREG else { throw ErrorBody(.badRequest, "\(path) is not a regular file") }
        let length = Int(st.st_size)
        guard length > Attachments.inlineLimit else {
            var bytes = [UInt8](repeating: 0, count: length)
            let n = bytes.withUnsafeMutableBytes { Glibc.pread(input, $0.baseAddress, length, 0) }
            guard n == length else { throw ErrorBody(.badRequest, "cannot read \(path): \(n < 0 ? String(cString: strerror(errno)) : "it changed while read")") }
            return .inline(bytes)
        }
        let fd = sp_bytes_writable(length)
        guard fd >= 0 else { throw ErrorBody(.unavailable, "cannot make a memfd for \(length) bytes: \(String(cString: strerror(-fd)))") }
        var inOffset: off_t = 0, outOffset: off_t = 0
        var crossDevice = false
        while Int(outOffset) < length {
            var n: Int
            if crossDevice {
                n = sendfile(fd, input, &inOffset, length - Int(outOffset))
                if n > 0 { outOffset += off_t(n) }
            } else {
                n = copy_file_range(input, &inOffset, fd, &outOffset, length - Int(outOffset), 0)
                if n < 0, errno == EXDEV || errno == EINVAL || errno == ENOSYS || errno == EOPNOTSUPP {
                    crossDevice = true
                    continue
                }
            }
            if n < 0, errno == EINTR { continue }
            guard n > 0 else {
                let why = n < 0 ? String(cString: strerror(errno)) : "it is shorter than it was"
                Glibc.close(fd)
                throw ErrorBody(.badRequest, "cannot read \(path): \(why)")
            }
        }
        let rc = sp_bytes_seal(fd)
        guard rc == 0 else {
            Glibc.close(fd)
            throw ErrorBody(.unavailable, "cannot seal the memfd: \(String(cString: strerror(-rc)))")
        }
        return .descriptor(fd, length: length)
    }

    /// What a request announces for `list` (SPEC §13): inline ones in the returned tail,
    /// descriptors handed in at the handoff socket (`<socketPath>.links`, a `put`) and named by
    /// their token. The descriptors stay the caller's.
    static func announce(_ list: [AttachedBytes], socketPath: String) throws -> (attachments: [Attachment], tail: [UInt8]) {
        var tail: [UInt8] = []
        var announced: [Attachment] = []
        for bytes in list {
            switch bytes {
            case .inline(let array):
                guard array.count <= Attachments.inlineLimit else { throw ErrorBody(.badRequest, "inline bytes of more than \(Attachments.inlineLimit >> 10) KiB: use AttachedBytes.from") }
                tail.append(contentsOf: array)
                announced.append(Attachment(length: array.count, place: .inline))
            case .descriptor(let fd, let length):
                announced.append(Attachment(length: length, place: .token(try Handoff.deposit(fd, length: length, at: socketPath + ".links"))))
            }
        }
        return (announced, tail)
    }
}

/// The supervisor's handoff socket (`<control socket>.links`): a one-time token in, the
/// descriptor it stands for out; or bytes in (`put`), their token out.
enum Handoff {
    /// Hands the sealed memfd `fd` of `length` bytes in at `path` (`{"put": length}` with it
    /// attached) and returns the token a call names it by (good once, for 10 s).
    static func deposit(_ fd: Int32, length: Int, at path: String) throws -> String {
        let handoff = try BlockingConnection.connect(path: path)
        defer { handoff.close() }
        var limit = timeval(tv_sec: 2, tv_usec: 0)
        setsockopt(handoff.fd, SOL_SOCKET, SO_RCVTIMEO, &limit, socklen_t(MemoryLayout<timeval>.size))
        let request = try ProtocolJSON.frame(["put": length])
        var descriptor = fd
        let sent = request.withUnsafeBytes { cls_send_fds(handoff.fd, &descriptor, 1, $0.baseAddress, $0.count) }
        guard sent == request.count else { throw ErrorBody(.unavailable, "cannot hand \(length) bytes to the supervisor: \(sent < 0 ? String(cString: strerror(Int32(-sent))) : "short write")") }
        struct Answer: Decodable { var token: String?; var error: String?; var code: String? }
        guard let frame = try handoff.receiveFrame(), let answer = try? ProtocolJSON.decode(Answer.self, from: frame) else {
            throw ErrorBody(.unavailable, "the supervisor did not answer the hand-in of \(length) bytes")
        }
        guard let token = answer.token else {
            let code = answer.code.flatMap(ErrorCode.init(rawValue:)) ?? .badRequest
            throw ErrorBody(code, "the supervisor refused \(length) bytes: \(answer.error ?? "no reason given")")
        }
        return token
    }

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
    /// Sends a request with `sending` attached (SPEC §13: the params name them `{"$bytes": i}`) and
    /// waits for its reply: its result and the bytes attached to it.
    public func requestWithBytes(_ kind: MessageKind, sending: [AttachedBytes] = [],
                                 _ fill: (inout FrameBuilder) -> Void) throws(Failure) -> (result: [UInt8], bytes: [AttachedBytes]) {
        if !sending.isEmpty {
            let announced: (attachments: [Attachment], tail: [UInt8])
            do { announced = try AttachedBytes.announce(sending, socketPath: socketPath) } catch let error as ErrorBody {
                throw .remote(error)
            } catch let error as SystemError {
                // Connected, and no answer in time: the supervisor is there, its hand-off busy.
                if [EAGAIN, EWOULDBLOCK, ETIMEDOUT].contains(error.errno) {
                    throw .broken("the supervisor did not answer on \(socketPath).links in time (\(error)); try again")
                }
                throw .unreachable(socketPath + ".links", error)
            } catch {
                throw .broken("\(error)")
            }
            let reply = try requestFrame(kind, { b in
                fill(&b)
                b.attachments(announced.attachments)
            }, tail: announced.tail)
            return try Self.answerWithBytes(reply, socketPath: socketPath)
        }
        let reply = try requestFrame(kind, fill)
        return try Self.answerWithBytes(reply, socketPath: socketPath)
    }

    /// A reply frame's result and the bytes attached to it.
    private static func answerWithBytes(_ reply: [UInt8], socketPath: String) throws(Failure) -> (result: [UInt8], bytes: [AttachedBytes]) {
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
