/// Up to 64 bytes of a frame assembled on the stack and appended to its sink at once (each append
/// to an array checks its storage again): `FrameEncoder`'s small pieces, `Frame.withHead`.
@usableFromInline
struct FrameScratch {
    @usableFromInline var bytes: (UInt64, UInt64, UInt64, UInt64, UInt64, UInt64, UInt64, UInt64) = (0, 0, 0, 0, 0, 0, 0, 0)
    @usableFromInline var count = 0
    @usableFromInline static var capacity: Int { 64 }

    @inlinable init() {}

    @inlinable mutating func skip(_ n: Int) { count += n }

    @inlinable mutating func add(_ byte: UInt8) {
        withUnsafeMutableBytes(of: &bytes) { $0[count] = byte }
        count += 1
    }

    @inlinable mutating func add(_ s: StaticString) {
        let n = s.utf8CodeUnitCount
        withUnsafeMutableBytes(of: &bytes) { $0.baseAddress!.advanced(by: count).copyMemory(from: s.utf8Start, byteCount: n) }
        count += n
    }

    /// `value`'s decimal digits (at most 20), two at a time (a 19-digit id is 10 divisions).
    @inlinable mutating func add(_ value: UInt64) {
        var digits: (UInt64, UInt64, UInt64) = (0, 0, 0)  // 24 bytes: room for 20 digits
        let pairs: StaticString = "00010203040506070809101112131415161718192021222324252627282930313233343536373839404142434445464748495051525354555657585960616263646566676869707172737475767778798081828384858687888990919293949596979899"
        let table = pairs.utf8Start
        var n = value
        var i = 24
        withUnsafeMutableBytes(of: &digits) { d in
            while n >= 100 {
                let r = Int(n % 100)
                n /= 100
                i -= 2
                d[i] = table[2 * r]
                d[i + 1] = table[2 * r + 1]
            }
            if n >= 10 {
                i -= 2
                d[i] = table[2 * Int(n)]
                d[i + 1] = table[2 * Int(n) + 1]
            } else {
                i -= 1
                d[i] = UInt8(truncatingIfNeeded: n) &+ 0x30
            }
            let length = 24 - i
            withUnsafeMutableBytes(of: &bytes) { $0.baseAddress!.advanced(by: count).copyMemory(from: d.baseAddress!.advanced(by: i), byteCount: length) }
            count += length
        }
    }

    @inlinable func write<S: FrameSink>(to sink: inout S) {
        withUnsafeBytes(of: bytes) { sink.append(bytes: UnsafeRawBufferPointer(rebasing: $0[0..<count])) }
    }
}

extension Frame {
    /// A frame's length prefix and `{"type":"<kind>","id":<id>` on the stack, for a frame whose body
    /// goes on with `restCount` bytes that are written after it (a reply passed on as its plugin
    /// wrote it after its id, with another id: the worker's peer links).
    @inlinable
    public static func withHead<R>(_ kind: MessageKind, id: UInt64, restCount: Int, _ body: (UnsafeRawBufferPointer) -> R) -> R {
        var scratch = FrameScratch()
        scratch.skip(headerSize)
        scratch.add(kind.openingMembers)
        scratch.add(#","id":"#)
        scratch.add(id)
        let length = UInt32(scratch.count - headerSize + restCount).bigEndian
        withUnsafeMutableBytes(of: &scratch.bytes) { $0.storeBytes(of: length, as: UInt32.self) }
        return withUnsafeBytes(of: scratch.bytes) { body(UnsafeRawBufferPointer(rebasing: $0[0..<scratch.count])) }
    }
}
