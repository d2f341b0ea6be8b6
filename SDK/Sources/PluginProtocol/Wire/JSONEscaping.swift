/// JSON string escaping.
public enum JSONEscaping {
    @inlinable
    public static func append<Sink: FrameSink>(_ s: String, to sink: inout Sink) {
        var s = s
        s.withUTF8 { utf8 in
            var runStart = 0
            for i in 0..<utf8.count {
                let c = utf8[i]
                guard c < 0x20 || c == UInt8(ascii: "\"") || c == UInt8(ascii: "\\") else { continue }
                if runStart < i { sink.append(bytes: UnsafeRawBufferPointer(rebasing: UnsafeRawBufferPointer(utf8)[runStart..<i])) }
                runStart = i + 1
                sink.append(byte: UInt8(ascii: "\\"))
                switch c {
                case UInt8(ascii: "\""), UInt8(ascii: "\\"): sink.append(byte: c)
                case 0x0A: sink.append(byte: UInt8(ascii: "n"))
                case 0x0D: sink.append(byte: UInt8(ascii: "r"))
                case 0x09: sink.append(byte: UInt8(ascii: "t"))
                default:
                    let hex: StaticString = "0123456789abcdef"
                    sink.append(byte: UInt8(ascii: "u"))
                    sink.append(byte: 0x30)
                    sink.append(byte: 0x30)
                    sink.append(byte: hex.utf8Start[Int(c >> 4)])
                    sink.append(byte: hex.utf8Start[Int(c & 0xF)])
                }
            }
            if runStart < utf8.count { sink.append(bytes: UnsafeRawBufferPointer(rebasing: UnsafeRawBufferPointer(utf8)[runStart...])) }
        }
    }

    /// `s` as a quoted JSON string.
    public static func quoted(_ s: String) -> [UInt8] {
        var out: [UInt8] = [UInt8(ascii: "\"")]
        append(s, to: &out)
        out.append(UInt8(ascii: "\""))
        return out
    }
}
