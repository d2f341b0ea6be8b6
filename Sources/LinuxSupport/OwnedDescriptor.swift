#if canImport(Glibc)
import Glibc
#endif

/// A file descriptor this code owns: closed when the value ends, unless ownership is handed on with
/// `release()` (to NIO, a child process, or another owner). Move-only, so it cannot be closed twice.
public struct OwnedDescriptor: ~Copyable, Sendable {
    public let raw: Int32

    /// Takes ownership of `raw`.
    public init(_ raw: Int32) { self.raw = raw }

    /// Gives up ownership: the caller is now responsible for closing the descriptor.
    public consuming func release() -> Int32 {
        let fd = raw
        discard self
        return fd
    }

    deinit { _ = Glibc.close(raw) }
}
