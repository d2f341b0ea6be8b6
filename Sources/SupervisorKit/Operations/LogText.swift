/// A plugin's text as the supervisor's log carries it: a `log` message, its metadata's keys and
/// strings, a line of its stdout or stderr. Control characters (a carriage return or a newline
/// that would start a line of its own, a terminal's escape sequences) are written as escapes, and
/// at most `limit` bytes are kept (the rest is cut, and said so): a plugin's text cannot forge a
/// line, nor reach the terminal the log is read on. A tab stays a tab.
enum LogText {
    /// As a line of a worker's output (`OutputCapture.lineLimit`).
    static let limit = OutputCapture.lineLimit

    static func shown(_ text: String) -> String {
        var out = ""
        var bytes = 0
        for scalar in text.unicodeScalars {
            let piece: String
            switch scalar.value {
            case 0x0A: piece = "\\n"
            case 0x0D: piece = "\\r"
            case 0x09: piece = "\t"
            case 0x00..<0x20, 0x7F..<0xA0: piece = "\\u{" + String(scalar.value, radix: 16) + "}"
            default: piece = String(scalar)
            }
            bytes += piece.utf8.count
            guard bytes <= limit else { return out + "… (\(text.utf8.count) bytes, cut)" }
            out += piece
        }
        return out
    }
}
