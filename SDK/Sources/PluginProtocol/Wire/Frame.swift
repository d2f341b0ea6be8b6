/// Framing constants shared by every peer: a 4-byte big-endian length, then that many bytes of JSON.
public enum Frame {
    /// Size of the length prefix.
    public static let headerSize = 4
    /// Default largest accepted frame body (16 MiB); configurable per receiver.
    public static let defaultMaxBody = 16 * 1024 * 1024
    /// Protocol version spoken in `hello`.
    public static let protocolVersion = 1
    /// Default deepest nesting of arrays and objects accepted in one message.
    public static let defaultMaxDepth = 64
    /// The one frame a standby worker waits for before it loads its plugin (`MessageKind.load`,
    /// `WorkerSpec.standby`): exactly these bytes.
    public static let loadBody: [UInt8] = Array(#"{"type":"load"}"#.utf8)

    /// Why a frame header is refused.
    public enum HeaderError: Error, Equatable, CustomStringConvertible, Sendable {
        case empty
        case tooLarge(length: Int, limit: Int)

        public var description: String {
            switch self {
            case .empty: return "frame of length 0"
            case .tooLarge(let length, let limit): return "frame of \(length) bytes is over the limit of \(limit) bytes"
            }
        }
    }

    /// Decodes and checks a big-endian length prefix.
    @inlinable
    public static func bodyLength(b0: UInt8, b1: UInt8, b2: UInt8, b3: UInt8, limit: Int) throws(HeaderError) -> Int {
        let length = Int(b0) << 24 | Int(b1) << 16 | Int(b2) << 8 | Int(b3)
        if length == 0 { throw .empty }
        if length > limit { throw .tooLarge(length: length, limit: limit) }
        return length
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
