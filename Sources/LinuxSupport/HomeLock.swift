#if canImport(Glibc)
import Glibc
#endif

/// One supervisor (or offline install) per home: an exclusive flock on `<home>/supervisor.lock`,
/// which holds the holder's pid. Released when the value ends.
public final class HomeLock {
    public enum Failure: Error, CustomStringConvertible {
        case cannotOpen(String, SystemError)
        /// Another process holds it; its pid as the file says.
        case held(path: String, pid: String)

        public var description: String {
            switch self {
            case .cannotOpen(let path, let error): return "cannot open \(path): \(error)"
            case .held(let path, let pid): return "\(path) is held by pid \(pid)"
            }
        }
    }

    private let fd: OwnedDescriptor

    /// Takes the lock without waiting, and writes our pid into it.
    public init(home: String) throws(Failure) {
        let path = home + "/supervisor.lock"
        let raw: Int32
        do { raw = try syscallRetrying("open", context: path) { open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0o600) } } catch {
            throw .cannotOpen(path, error)
        }
        let fd = OwnedDescriptor(raw)
        if flock(fd.raw, LOCK_EX | LOCK_NB) != 0 {
            let other = (try? FileSystem.readFile(path, limit: 64))
                .map { String(decoding: $0.filter { $0 >= 0x30 && $0 <= 0x39 }, as: UTF8.self) } ?? "?"
            throw .held(path: path, pid: other.isEmpty ? "?" : other)
        }
        _ = ftruncate(fd.raw, 0)
        let pid = "\(getpid())\n"
        _ = pid.withCString { pwrite(fd.raw, $0, strlen($0), 0) }
        self.fd = fd
    }

    /// The lock the previous binary held, handed over by an upgrade in place (the same open file,
    /// so the same lock: there is no moment another supervisor could take the home).
    public init(adopting descriptor: consuming OwnedDescriptor) {
        fd = descriptor
    }

    /// The locked file's descriptor, to hand to the binary an upgrade execs.
    public var descriptor: Int32 { fd.raw }

    deinit { _ = ftruncate(fd.raw, 0) }

    /// Whether a supervisor holds `<home>/supervisor.lock` now (it may still be starting).
    public static func isHeld(home: String) -> Bool {
        let raw = open(home + "/supervisor.lock", O_RDONLY | O_CLOEXEC)
        guard raw >= 0 else { return false }
        defer { close(raw) }
        return flock(raw, LOCK_SH | LOCK_NB) != 0 && errno == EWOULDBLOCK
    }
}
