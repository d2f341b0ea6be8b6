#if canImport(Glibc)
import Glibc
#endif

/// The process environment, read without Foundation's ProcessInfo (the supervisor and the worker do
/// not load Foundation).
public enum ProcessEnvironment {
    public static var all: [String: String] {
        var out: [String: String] = [:]
        var p = environ
        while let entry = p.pointee {
            let s = String(cString: entry)
            if let eq = s.firstIndex(of: "=") { out[String(s[..<eq])] = String(s[s.index(after: eq)...]) }
            p += 1
        }
        return out
    }

    public static subscript(_ name: String) -> String? {
        getenv(name).map { String(cString: $0) }
    }
}

/// Standard error without Foundation's FileHandle.
/// Standard output, written at once (no stdio buffer): a stream's lines reach a pipe as they come.
public enum StandardOutput {
    public static func write(_ bytes: UnsafeRawBufferPointer) {
        var done = 0
        while done < bytes.count {
            let n = Glibc.write(1, bytes.baseAddress! + done, bytes.count - done)
            if n < 0 && errno == EINTR { continue }
            guard n > 0 else { return }
            done += n
        }
    }
}

public enum StandardError {
    public static func write(_ s: String) {
        _ = s.withCString { Glibc.write(2, $0, strlen($0)) }
    }
}
