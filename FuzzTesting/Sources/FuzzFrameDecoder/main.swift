// Fuzzes PluginProtocol.FrameDecoder: the split of a peer's byte stream into frame bodies.
//
// Input layout: byte 0 picks a small `maxBody` (1...256), byte 1 picks how the rest is cut into
// chunks (and, for 1 input in 32, puts a 64 KiB frame first so the decoder compacts its buffer);
// the rest is the stream. The decoder's frames are checked against a plain reference reading of the
// whole stream: same bodies in the same order, an error exactly where the reference meets a bad
// header, and the same bytes left over at the end.

import PluginProtocol
#if canImport(Glibc)
import Glibc
#endif

@_cdecl("LLVMFuzzerTestOneInput")
public func fuzz(_ start: UnsafeRawPointer, _ count: Int) -> CInt {
    let input = UnsafeRawBufferPointer(start: start, count: count)
    guard input.count >= 2 else { return 0 }
    let mode = input[1]
    let data = UnsafeRawBufferPointer(rebasing: input[2...])

    // 1 in 32 (mode 0xF8...0xFF): the stream starts with one frame of 64 KiB + 1 bytes, appended in
    // one chunk with the first 1...4 fuzzed bytes (part of a header), so that the decoder's read
    // index is past its compaction threshold while those bytes are still buffered when the next
    // chunk comes.
    let big = mode >= 0xF8
    let prefixBody = big ? 65_537 : 0
    let maxBody = prefixBody + 1 + Int(input[0])
    var stream: [UInt8] = []
    if big {
        stream.reserveCapacity(Frame.headerSize + prefixBody + data.count)
        stream += [0, 1, 0, 1]  // 65_537, big-endian
        stream += repeatElement(UInt8(ascii: " "), count: prefixBody)
    }
    stream += data

    let expected = Reference(stream, maxBody: maxBody)
    var decoder = FrameDecoder(maxBody: maxBody)
    precondition(decoder.state == .waitingForHeader && decoder.bufferedCount == 0)
    var chunks = ChunkSizes(mode: mode)
    var offset = 0
    var frameIndex = 0
    var failed = false

    stream.withUnsafeBytes { all in
        feed: while offset < all.count {
            var n = min(chunks.next(), all.count - offset)
            if offset == 0, big { n = min(Frame.headerSize + prefixBody + 1 + (n - 1) % 4, all.count) }
            decoder.append(UnsafeRawBufferPointer(rebasing: all[offset..<(offset + n)]))
            offset += n
            precondition(decoder.bufferedCount >= 0 && decoder.bufferedCount <= offset)
            while true {
                let got: Bool?
                do {
                    got = try decoder.next { body -> Bool in
                        precondition((1...maxBody).contains(body.count), "frame body of \(body.count) bytes, limit \(maxBody)")
                        precondition(frameIndex < expected.frames.count, "a frame the reference does not have")
                        let want = expected.frames[frameIndex]
                        precondition(want.count == body.count && memcmp(body.baseAddress!, all.baseAddress! + want.lowerBound, body.count) == 0,
                                     "frame \(frameIndex) differs from the stream's bytes")
                        return true
                    }
                } catch {
                    failed = true
                    precondition(error is Frame.HeaderError, "unexpected error type \(error)")
                    break feed
                }
                precondition(decoder.bufferedCount >= 0, "negative bufferedCount")
                guard got != nil else { break }
                frameIndex += 1
            }
        }
    }

    if failed {
        // Stopped at the first bad header, as the reference did, after every good frame before it.
        precondition(expected.badHeader, "decoder threw where the reference found no bad header")
        precondition(frameIndex == expected.frames.count, "\(frameIndex) frames before the error, the reference \(expected.frames.count)")
    } else {
        precondition(!expected.badHeader, "decoder missed a bad header")
        precondition(frameIndex == expected.frames.count, "decoded \(frameIndex) frames, the reference \(expected.frames.count)")
        let left = stream.count - expected.end
        if left >= Frame.headerSize {
            let length = expected.pendingLength!
            precondition(decoder.state == .waitingForFrame(length: length), "state \(decoder.state), want body of \(length)")
            precondition(decoder.bufferedCount == left - Frame.headerSize, "bufferedCount \(decoder.bufferedCount), want \(left - Frame.headerSize)")
        } else {
            precondition(decoder.state == .waitingForHeader, "state \(decoder.state), want waitingForHeader")
            precondition(decoder.bufferedCount == left, "bufferedCount \(decoder.bufferedCount), want \(left)")
        }
    }
    return 0
}

/// The whole stream read in one go: the frames' ranges, whether it ends on a bad header, where the
/// last whole frame ends and, if a valid header follows it, that frame's length.
struct Reference {
    var frames: [Range<Int>] = []
    var badHeader = false
    var end = 0
    var pendingLength: Int?

    init(_ s: [UInt8], maxBody: Int) {
        var pos = 0
        while s.count - pos >= Frame.headerSize {
            let length = Int(s[pos]) << 24 | Int(s[pos + 1]) << 16 | Int(s[pos + 2]) << 8 | Int(s[pos + 3])
            if length == 0 || length > maxBody { badHeader = true; break }
            if s.count - pos - Frame.headerSize < length { pendingLength = length; break }
            frames.append((pos + Frame.headerSize)..<(pos + Frame.headerSize + length))
            pos += Frame.headerSize + length
        }
        end = pos
    }
}

/// Chunk sizes chosen by the mode byte's low 5 bits: all of it at once, single bytes, a header's
/// size, or a fixed pseudo-random sequence of sizes in 1...6 up to 1...62.
struct ChunkSizes {
    var state: UInt32
    let mode: UInt8

    init(mode: UInt8) {
        self.mode = mode
        state = UInt32(mode) &* 2_654_435_761 | 1
    }

    mutating func next() -> Int {
        switch mode & 0x1F {
        case 0: return Int.max
        case 1: return 1
        case 2: return Frame.headerSize
        default:
            state ^= state << 13
            state ^= state >> 17
            state ^= state << 5
            let limit = Int(mode & 0x1F) * 2  // 6...62
            return 1 + Int(state % UInt32(limit))
        }
    }
}
