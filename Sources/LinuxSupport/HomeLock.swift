#if canImport(Glibc)
import Glibc
#endif

/// One supervisor (or offline install) per home: an exclusive flock on `<home>/supervisor.lock`,
/// which holds the holder's pid and what it is (`<pid> supervisor`, `<pid> install`). Released
/// when the value ends.
public final class HomeLock {
    /// What holds a home.
    public enum Holder: String, Sendable {
        case supervisor
        /// `supervisor install` with no supervisor running, installing into the home itself.
        case install
    }

    public enum Failure: Error, CustomStringConvertible {
        case cannotOpen(String, SystemError)
        /// Another process holds it; its pid and what it is, as the file says (a file without the
        /// second word, from an older binary: a supervisor).
        case held(path: String, pid: String, by: Holder)

        public var description: String {
            switch self {
            case .cannotOpen(let path, let error): return "cannot open \(path): \(error)"
            case .held(let path, let pid, let holder): return "\(path) is held by pid \(pid) (\(holder == .install ? "an offline install" : "a supervisor"))"
            }
        }
    }

    private let fd: OwnedDescriptor

    /// Takes the lock without waiting, and writes our pid and `holder` into it.
    public init(home: String, holder: Holder = .supervisor) throws(Failure) {
        let path = home + "/supervisor.lock"
        let raw: Int32
        do { raw = try syscallRetrying("open", context: path) { open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0o600) } } catch {
            throw .cannotOpen(path, error)
        }
        let fd = OwnedDescriptor(raw)
        if flock(fd.raw, LOCK_EX | LOCK_NB) != 0 {
            let words = String(decoding: (try? FileSystem.readFile(path, limit: 64)) ?? [], as: UTF8.self).split(whereSeparator: \.isWhitespace)
            let pid = words.first.map { String($0.filter(\.isNumber)) } ?? ""
            throw .held(path: path, pid: pid.isEmpty ? "?" : pid, by: words.dropFirst().first.flatMap { Holder(rawValue: String($0)) } ?? .supervisor)
        }
        _ = ftruncate(fd.raw, 0)
        let pid = "\(getpid()) \(holder.rawValue)\n"
        let written = pid.withCString { pwrite(fd.raw, $0, strlen($0), 0) }
        unwritten = written == pid.utf8.count ? nil : String(cString: strerror(written < 0 ? errno : ENOSPC))
        self.fd = fd
    }

    /// Why our pid could not be written into the lock (a full disk), if it could not: the lock
    /// holds all the same, but another supervisor turned away cannot say whose it is.
    public private(set) var unwritten: String? = nil

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
