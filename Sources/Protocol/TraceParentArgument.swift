import PluginProtocol

/// Checks a `traceparent` given on the command line (`supervisor call --traceparent`) or to a
/// client library with the reader the supervisor and the workers use (`TraceParentText`), so what a
/// client accepts is what the supervisor continues.
public enum TraceParentArgument {
    /// nil when `text` is a valid traceparent, else why not.
    public static func problem(_ text: String) -> String? {
        let quoted = JSONEscaping.quoted(text)
        var trace = [UInt8](repeating: 0, count: 16)
        var flags: UInt8 = 0
        let valid = quoted.withUnsafeBytes { raw in
            trace.withUnsafeMutableBytes { TraceParentText.parent(inJSON: raw, trace: $0, flags: &flags) }
        }
        if valid { return nil }
        return "expected 00-<trace id: 32 lowercase hex digits, not all 0>-<parent id: 16 lowercase hex digits, not all 0>-<flags: 2 hex digits> (55 characters, this has \(text.utf8.count))"
    }
}
