#if canImport(Glibc)
import Glibc
#endif

/// Bytes attached to a message (SPEC §13, docs/protocol.md "Bytes"): raw bytes that travel without
/// base64. A message lists them in its top-level `"attachments"` array, and a value in its
/// `params`, `result` or `data` refers to one as `{"$bytes": <index>}`. An attachment's bytes are:
/// - **inline**: in the frame itself, after its JSON and one NUL byte, in order (at most
///   `inlineLimit` each): `{"length": N}`;
/// - **a descriptor**: a memfd sealed against writes, shrinking and growing, passed with the
///   frame: `{"length": N, "fd": true}` between processes, `{"length": N, "fd": <number>}` inside
///   one (between a worker and its plugin);
/// - **a token**: for a control client, which picks the descriptor up at the supervisor's handoff
///   socket: `{"length": N, "token": "…"}`.
public struct Attachment: Equatable, Sendable {
    public enum Place: Equatable, Sendable {
        case inline
        /// A descriptor passed with the frame: its number in this process, or -1 on the wire.
        case descriptor(Int32)
        case token(String)
    }

    public var length: Int
    public var place: Place

    public init(length: Int, place: Place) {
        self.length = length
        self.place = place
    }

    public var isInline: Bool { place == .inline }
    public var isToken: Bool { if case .token = place { return true } else { return false } }
    public var isDescriptor: Bool { if case .descriptor = place { return true } else { return false } }
}

public enum Attachments {
    /// Bytes up to this size travel in the frame; larger ones as a sealed memfd.
    public static let inlineLimit = 64 * 1024
    /// The most descriptors one message may carry.
    public static let maxDescriptors = 16
    /// The default largest payload (`limits.maxPayloadMB`), in MiB.
    public static let defaultMaxPayloadMB = 1024

    /// Why an `attachments` member cannot be used.
    public struct Problem: Error, Equatable, CustomStringConvertible, Sendable {
        public let description: String
        public init(_ description: String) { self.description = description }
    }

    /// Reads the `attachments` array at `range` of `bytes`, checked for shape: each an object
    /// with a `length` (an unsigned integer), inline ones within `inlineLimit`, at most
    /// `maxDescriptors` descriptors or tokens.
    public static func read(_ bytes: UnsafeRawBufferPointer, _ range: Range<Int>) throws(Problem) -> [Attachment] {
        var list: [Attachment] = []
        var scanner = JSONScanner(UnsafeRawBufferPointer(rebasing: bytes[range]))
        var problem: Problem?
        do {
            try scanner.scanArray { (value) throws(JSONScanner.Failure) in
                let element = UnsafeRawBufferPointer(rebasing: bytes[range][(range.lowerBound + value.lowerBound)..<(range.lowerBound + value.upperBound)])
                var length: UInt64?
                var place = Attachment.Place.inline
                var inner = JSONScanner(element)
                do {
                    try inner.scanObject { (key, v) throws(JSONScanner.Failure) in
                        let name = String(decoding: element[key], as: UTF8.self)
                        switch name {
                        case "length": length = JSONScanner.decodeUInt(element, v)
                        case "fd":
                            if v.count == 4, element[v.lowerBound] == UInt8(ascii: "t") { place = .descriptor(-1) }
                            else if let n = JSONScanner.decodeUInt(element, v), n <= UInt64(Int32.max) { place = .descriptor(Int32(n)) }
                            else { problem = Problem("an attachment's fd is neither true nor a descriptor number") }
                        case "token":
                            if let t = JSONScanner.decodeString(element, v) { place = .token(t) } else { problem = Problem("an attachment's token is not a string") }
                        default: break
                        }
                    }
                } catch {
                    problem = problem ?? Problem("an attachment is not a JSON object")
                    return
                }
                guard let length, length <= UInt64(Int.max / 2) else {
                    problem = problem ?? Problem("an attachment without a length (an unsigned integer)")
                    return
                }
                if place == .inline, length > UInt64(inlineLimit) {
                    problem = problem ?? Problem("an inline attachment of \(length) bytes, over \(inlineLimit)")
                }
                list.append(Attachment(length: Int(length), place: place))
            }
        } catch {
            throw Problem("attachments is not a JSON array: \(error)")
        }
        if let problem { throw problem }
        if list.filter({ !$0.isInline }).count > maxDescriptors {
            throw Problem("more than \(maxDescriptors) attachments passed as descriptors")
        }
        return list
    }

    /// The inline bytes the list announces.
    public static func inlineCount(_ list: [Attachment]) -> Int {
        list.reduce(0) { $0 + ($1.isInline ? $1.length : 0) }
    }

    /// What a message between two processes of ours announces (the supervisor reading a worker's,
    /// a worker reading a peer's over a link): nil when it lists no attachments and has nothing
    /// after its JSON; else the list, when its inline bytes are exactly those after the JSON and
    /// none is a token (tokens are a control client's). The one check of that shape; the
    /// descriptors are checked by `placing`.
    public static func announced(in env: Envelope, _ bytes: UnsafeRawBufferPointer) throws(Problem) -> [Attachment]? {
        guard let range = env.attachments else {
            if env.tail != nil { throw Problem("data after the JSON object of a message without attachments") }
            return nil
        }
        let list = try read(bytes, range)
        let inline = inlineCount(list), came = env.tail?.count ?? 0
        guard inline == came else { throw Problem("its attachments announce \(inline) inline bytes and \(came) came") }
        guard !list.contains(where: \.isToken) else { throw Problem("an attachment with a token") }
        return list
    }

    /// `descriptors`, which came with a message listing `list`, in its places: as many as it
    /// announces, each first checked by `check(fd, length)` (0 for a memfd sealed against writes,
    /// shrinking and growing, of that length; else `-EBADF`, `-EPERM` or another negative errno,
    /// as `sp_bytes_check` answers). The list with their numbers, or why not (the caller closes
    /// them then).
    public static func placing(_ descriptors: [Int32], in list: [Attachment], check: (Int32, Int) -> Int32) throws(Problem) -> [Attachment] {
        let expected = list.filter(\.isDescriptor).count
        guard descriptors.count == expected else { throw Problem("\(expected) descriptors announced, \(descriptors.count) came") }
        var placed = list
        var next = 0
        for i in placed.indices where placed[i].isDescriptor {
            let rc = check(descriptors[next], placed[i].length)
            if rc != 0 {
                let why = rc == -EBADF ? "not a memfd: it is \(kind(of: descriptors[next]))"
                    : rc == -EPERM ? "not sealed against writes, shrinking and growing" : "not of the announced \(placed[i].length) bytes"
                throw Problem("attachment \(i) (the \(ordinal(next + 1)) descriptor that came) is \(why)")
            }
            placed[i].place = .descriptor(descriptors[next])
            next += 1
        }
        return placed
    }
}

extension Attachments {
    /// What the descriptor `fd` is, for a message: "a pipe", "a socket", "a regular file", ...
    public static func kind(of fd: Int32) -> String {
        var st = stat()
        guard fstat(fd, &st) == 0 else { return "not an open descriptor" }
        switch st.st_mode & S_IFMT {
        case S_IFIFO: return "a pipe"
        case S_IFSOCK: return "a socket"
        case S_IFREG: return "a regular file"
        case S_IFDIR: return "a folder"
        case S_IFCHR: return "a character device"
        case S_IFBLK: return "a block device"
        default: return "a descriptor of another kind"
        }
    }

    static func ordinal(_ n: Int) -> String {
        let suffix = (11...13).contains(n % 100) ? "th" : ["th", "st", "nd", "rd"][n % 10 < 4 ? n % 10 : 0]
        return "\(n)\(suffix)"
    }

    /// The message `body` (which lists attachments, `env` its reading) with `list` in place of its
    /// own attachments, every other member and the inline bytes as they were: a whole frame,
    /// length prefix included. How a receiver puts its own descriptor numbers in.
    public static func replacing(in body: UnsafeRawBufferPointer, _ env: Envelope, with list: [Attachment]) -> [UInt8] {
        var frame = FrameBuilder(kind: env.kind ?? .reply, capacity: body.count + 32 * list.count)
        let json = env.tail.map { UnsafeRawBufferPointer(rebasing: body[..<($0.lowerBound - 1)]) } ?? body
        frame.members(of: json, except: ["type", "attachments"])
        frame.attachments(list)
        let tail = env.tail.map { UnsafeRawBufferPointer(rebasing: body[$0]) } ?? UnsafeRawBufferPointer(start: nil, count: 0)
        return frame.finish(tail: tail)
    }

    /// `list` as it goes between processes: each descriptor's number replaced by `true`.
    public static func onTheWire(_ list: [Attachment]) -> [Attachment] {
        list.map { $0.isDescriptor ? Attachment(length: $0.length, place: .descriptor(-1)) : $0 }
    }

    /// The descriptor numbers `list` names, in order.
    public static func descriptors(_ list: [Attachment]) -> [Int32] {
        list.compactMap { if case .descriptor(let fd) = $0.place { return fd } else { return nil } }
    }
}

extension FrameEncoder {
    /// Writes `"attachments": [...]` for `list` (a descriptor with a number below 0 as `true`).
    @inlinable
    public mutating func attachments(_ list: [Attachment]) {
        appendKey("attachments")
        sink.append(byte: UInt8(ascii: "["))
        for (i, a) in list.enumerated() {
            if i > 0 { sink.append(byte: UInt8(ascii: ",")) }
            appendLiteral("{\"length\":")
            appendUInt(UInt64(a.length))
            switch a.place {
            case .inline: break
            case .descriptor(let fd):
                appendLiteral(",\"fd\":")
                if fd < 0 { appendLiteral("true") } else { appendUInt(UInt64(fd)) }
            case .token(let token):
                appendLiteral(",\"token\":")
                appendString(token)
            }
            sink.append(byte: UInt8(ascii: "}"))
        }
        sink.append(byte: UInt8(ascii: "]"))
    }

    /// Copies every top-level member of the JSON object `object` but those named in `except`
    /// (a message rewritten with new ids or attachments).
    @inlinable
    public mutating func members(of object: UnsafeRawBufferPointer, except: [StaticString]) {
        var scanner = JSONScanner(object)
        try? scanner.scanObject { (key, value) throws(JSONScanner.Failure) in
            for name in except where key.count == name.utf8CodeUnitCount && Envelope.matches(object, key, name) { return }
            if first { first = false } else { sink.append(byte: UInt8(ascii: ",")) }
            sink.append(byte: UInt8(ascii: "\""))
            sink.append(bytes: UnsafeRawBufferPointer(rebasing: object[key]))
            sink.append(byte: UInt8(ascii: "\""))
            sink.append(byte: UInt8(ascii: ":"))
            sink.append(bytes: UnsafeRawBufferPointer(rebasing: object[value]))
        }
    }
}
