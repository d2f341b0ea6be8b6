#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif

/// A failed system call: which call, on what, and the errno it returned.
public struct SystemError: Error, Equatable, CustomStringConvertible, Sendable {
    public var call: String
    public var errno: Int32
    public var context: String

    public init(call: String, errno: Int32, context: String = "") {
        self.call = call
        self.errno = errno
        self.context = context
    }

    public var description: String {
        let reason = String(cString: strerror(errno))
        return context.isEmpty ? "\(call) failed: \(reason)" : "\(call) failed on \(context): \(reason)"
    }
}

/// The one funnel for raw syscalls in this target: retries EINTR, reads errno at once.
@inline(__always)
public func syscallRetrying<T: FixedWidthInteger>(
    _ call: @autoclosure () -> String, context: @autoclosure () -> String = "", _ body: () -> T
) throws(SystemError) -> T {
    while true {
        let result = body()
        if result != -1 { return result }
        let code = errno
        if code == EINTR { continue }
        throw SystemError(call: call(), errno: code, context: context())
    }
}

/// After a vectored write of `n` bytes from `iov[first...]`: moves `first` past the buffers written
/// whole and trims the one written in part (a short write on a stream socket).
public func advance(_ iov: UnsafeMutableBufferPointer<iovec>, first: inout Int, by n: Int) {
    var consumed = n
    while first < iov.count, consumed >= iov[first].iov_len {
        consumed -= iov[first].iov_len
        first += 1
    }
    if first < iov.count, consumed > 0 {
        iov[first].iov_base = iov[first].iov_base! + consumed
        iov[first].iov_len -= consumed
    }
}
