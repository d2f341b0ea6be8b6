#if canImport(Glibc)
import Glibc
#endif

/// A confinement step that failed: which call, on what, and the kernel's reason.
public struct ConfinementError: Error, CustomStringConvertible, Sendable {
    public var message: String
    /// The kernel's reason where a folder the confinement needs could not be made (the disk's
    /// fault rather than the sandbox's: full, read-only).
    public var code: Int32?

    public init(_ message: String, code: Int32? = nil) {
        self.message = message
        self.code = code
    }

    /// "`call` on `path` failed: <strerror(code)>".
    public init(call: String, errno code: Int32, path: String? = nil) {
        message = "\(call)\(path.map { " on \($0)" } ?? "") failed: \(String(cString: strerror(code)))"
    }

    public var description: String { message }
}
