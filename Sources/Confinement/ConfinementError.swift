#if canImport(Glibc)
import Glibc
#endif

/// A confinement step that failed: which call, on what, and the kernel's reason.
public struct ConfinementError: Error, CustomStringConvertible, Sendable {
    public var message: String

    public init(_ message: String) { self.message = message }

    /// "`call` on `path` failed: <strerror(code)>".
    public init(call: String, errno code: Int32, path: String? = nil) {
        message = "\(call)\(path.map { " on \($0)" } ?? "") failed: \(String(cString: strerror(code)))"
    }

    public var description: String { message }
}
