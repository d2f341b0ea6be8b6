import CLinuxSupport
#if canImport(Glibc)
import Glibc
#endif

/// The few file-system calls the supervisor makes, each failing with a `SystemError` naming the path.
public enum FileSystem {
    /// Reads a whole regular file of at most `limit` bytes, to its end (procfs files report size 0).
    /// Anything else is refused before a byte is read: opened without blocking, so that a FIFO,
    /// which would wait for a writer, is named rather than waited on.
    /// What a file of type `type` (`st_mode & S_IFMT`) is, in words: "a FIFO", "a folder", ...
    public static func kindName(_ type: mode_t) -> String {
        [S_IFREG: "a regular file", S_IFDIR: "a folder", S_IFLNK: "a symbolic link", S_IFIFO: "a FIFO",
         S_IFCHR: "a character device", S_IFBLK: "a block device", S_IFSOCK: "a socket"][type] ?? "a special file"
    }

    public static func readFile(_ path: String, limit: Int) throws(SystemError) -> [UInt8] {
        let fd = try syscallRetrying("open", context: path) { open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK) }
        defer { close(fd) }
        var st = stat()
        _ = try syscallRetrying("fstat", context: path) { fstat(fd, &st) }
        switch st.st_mode & S_IFMT {
        case S_IFREG: break
        case S_IFDIR: throw SystemError(call: "open", errno: EISDIR, context: path)
        case let type:
            throw SystemError(call: "open", errno: EINVAL, context: "\(path), \(kindName(type)) and not a regular file")
        }
        guard Int(st.st_size) <= limit else { throw SystemError(call: "read", errno: EFBIG, context: path) }
        var out: [UInt8] = []
        out.reserveCapacity(Int(st.st_size))
        let chunk = 64 * 1024
        let raw = UnsafeMutableRawPointer.allocate(byteCount: chunk, alignment: 1)
        defer { raw.deallocate() }
        while true {
            let n = try syscallRetrying("read", context: path) { read(fd, raw, chunk) }
            if n == 0 { break }
            guard out.count + n <= limit else { throw SystemError(call: "read", errno: EFBIG, context: path) }
            out.append(contentsOf: UnsafeRawBufferPointer(start: raw, count: n))
        }
        return out
    }

    /// Names in a folder, sorted, without `.` and `..`.
    public static func list(_ path: String) throws(SystemError) -> [String] {
        guard let dir = opendir(path) else { throw SystemError(call: "opendir", errno: errno, context: path) }
        defer { closedir(dir) }
        var names: [String] = []
        while let entry = readdir(dir) {
            let name = withUnsafePointer(to: entry.pointee.d_name) { p in
                p.withMemoryRebound(to: CChar.self, capacity: 256) { String(cString: $0) }
            }
            if name != "." && name != ".." { names.append(name) }
        }
        return names.sorted()
    }

    public static func isDirectory(_ path: String) -> Bool {
        var st = stat()
        return stat(path, &st) == 0 && (st.st_mode & S_IFMT) == S_IFDIR
    }

    public static func exists(_ path: String) -> Bool { access(path, F_OK) == 0 }

    /// Whether there is an entry at `path` itself, of any type: a symbolic link counts, whether
    /// or not what it points to exists.
    public static func hasEntry(_ path: String) -> Bool {
        var st = stat()
        return lstat(path, &st) == 0
    }

    /// mkdir -p with `mode` for the folders it creates. From the folder itself upwards: one call
    /// when it or its parent exists already (every spawn makes its worker's data, live and
    /// temporary folders, which are nearly always there or one level away), not one per level.
    public static func makeDirectories(_ path: String, mode: mode_t = 0o700) throws(SystemError) {
        if mkdir(path, mode) == 0 { return }
        let failure = errno
        switch failure {
        case EEXIST:
            return
        case ENOENT:
            // A parent is missing: make it, then this one.
            var parent = path
            while parent.hasSuffix("/") { parent.removeLast() }
            guard let slash = parent.lastIndex(of: "/") else { throw SystemError(call: "mkdir", errno: failure, context: path) }
            parent = String(parent[..<slash])
            if !parent.isEmpty { try makeDirectories(parent, mode: mode) }
            if mkdir(path, mode) != 0 && errno != EEXIST { throw SystemError(call: "mkdir", errno: errno, context: path) }
        default:
            throw SystemError(call: "mkdir", errno: failure, context: path)
        }
    }

    /// The absolute, symlink-free form of `path`.
    public static func realPath(_ path: String) -> String? {
        guard let p = realpath(path, nil) else { return nil }
        defer { free(p) }
        return String(cString: p)
    }

    /// `path` from the root: a relative one is taken from the current directory (the workers run
    /// elsewhere, so every path handed to them must be absolute).
    public static func absolute(_ path: String) -> String {
        guard !path.hasPrefix("/") else { return path }
        var buffer = [CChar](repeating: 0, count: Int(PATH_MAX) + 1)
        guard getcwd(&buffer, buffer.count) != nil else { return path }
        let cwd = buffer.withUnsafeBufferPointer { String(cString: $0.baseAddress!) }
        let rest = path.hasPrefix("./") ? String(path.dropFirst(2)) : path
        return rest.isEmpty || rest == "." ? cwd : (cwd == "/" ? "" : cwd) + "/" + rest
    }

    /// The text of the symbolic link `path` (readlink), or nil when it is not one.
    public static func linkText(_ path: String) -> String? {
        var buffer = [CChar](repeating: 0, count: Int(PATH_MAX) + 1)
        let n = readlink(path, &buffer, buffer.count - 1)
        guard n > 0 else { return nil }
        return String(decoding: buffer[0..<n].map { UInt8(bitPattern: $0) }, as: UTF8.self)
    }

    /// The folder holding the running executable.
    public static func executableDirectory() -> String {
        let path = executablePath()
        guard path.hasPrefix("/") else { return "." }
        return String(path[..<(path.lastIndex(of: "/") ?? path.endIndex)])
    }

    /// The path of the running executable, without the " (deleted)" the kernel adds once its file
    /// was replaced (an upgrade's default binary is the new file at that path); "/proc/self/exe"
    /// when it cannot be read.
    public static func executablePath() -> String {
        var buffer = [CChar](repeating: 0, count: Int(PATH_MAX) + 1)
        let n = readlink("/proc/self/exe", &buffer, buffer.count - 1)
        guard n > 0 else { return "/proc/self/exe" }
        var path = String(decoding: buffer[0..<n].map { UInt8(bitPattern: $0) }, as: UTF8.self)
        if path.hasSuffix(" (deleted)") { path.removeLast(" (deleted)".count) }
        return path
    }
}

extension FileSystem {
    /// renameat2(RENAME_EXCHANGE): swaps two paths atomically.
    public static func exchange(_ a: String, _ b: String) throws(SystemError) {
        try ProcessControl.check("renameat2(RENAME_EXCHANGE)", cls_exchange(a, b), context: "\(a) and \(b)")
    }

    /// Replaces `path` with `bytes` so that a crash leaves the old contents or the new, never a mix:
    /// a temporary file beside it, written and synced, then renamed over it.
    public static func writeAtomically(_ path: String, _ bytes: [UInt8], mode: mode_t = 0o600) throws(SystemError) {
        let temp = path + ".tmp"
        let fd = open(temp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, mode)
        guard fd >= 0 else { throw SystemError(call: "open", errno: errno, context: temp) }
        var written = 0
        while written < bytes.count {
            let n = bytes.withUnsafeBytes { write(fd, $0.baseAddress! + written, bytes.count - written) }
            if n < 0 {
                if errno == EINTR { continue }
                let e = errno
                close(fd)
                unlink(temp)
                throw SystemError(call: "write", errno: e, context: temp)
            }
            written += n
        }
        if fsync(fd) != 0 {
            let e = errno
            close(fd)
            unlink(temp)
            throw SystemError(call: "fsync", errno: e, context: temp)
        }
        close(fd)
        try rename(temp, to: path)
    }

    /// rename(2).
    public static func rename(_ from: String, to: String) throws(SystemError) {
        _ = try syscallRetrying("rename", context: "\(from) to \(to)") { Glibc.rename(from, to) }
    }

    /// fsync of a folder or file by path (after a rename in it, so the rename survives a power loss).
    public static func sync(_ path: String) throws(SystemError) {
        try ProcessControl.check("fsync", cls_fsync_path(path), context: path)
    }
}

/// SO_PEERCRED's answer (struct ucred's layout), for checking who connected to a Unix socket.
public struct PeerCredentials: Sendable {
    public var pid: Int32
    public var uid: UInt32
    public var gid: UInt32
    public init() { pid = 0; uid = 0; gid = 0 }
    /// The socket option's number (SOL_SOCKET level); glibc hides SO_PEERCRED behind _GNU_SOURCE.
    public static let socketOption: Int32 = 17
}

extension FileSystem {
    /// rm -rf: removes `path` and everything beneath it, never following a symbolic link (a link is
    /// removed, not what it points to). Errors are ignored: what cannot be removed stays.
    public static func removeTree(_ path: String) {
        var st = stat()
        guard lstat(path, &st) == 0 else { return }
        if (st.st_mode & S_IFMT) == S_IFDIR {
            for name in (try? list(path)) ?? [] { removeTree(path + "/" + name) }
            _ = rmdir(path)
        } else {
            _ = unlink(path)
        }
    }
}

/// Which file a path names and when it last changed: a file written over in place keeps its inode
/// but not its size or modification time; one renamed over it has another inode. (A plugin's
/// library at spawn against at its worker's end; a manifest's libraries between two scans.)
public struct FileStamp: Equatable, Sendable, CustomStringConvertible {
    public var device: UInt64
    public var inode: UInt64
    public var size: Int64
    public var modifiedSeconds: Int
    public var modifiedNanoseconds: Int

    /// Nil when `path` cannot be stat'ed.
    public init?(path: String) {
        var st = stat()
        guard stat(path, &st) == 0 else { return nil }
        device = UInt64(st.st_dev)
        inode = UInt64(st.st_ino)
        size = Int64(st.st_size)
        modifiedSeconds = st.st_mtim.tv_sec
        modifiedNanoseconds = st.st_mtim.tv_nsec
    }

    public var description: String { "\(size):\(modifiedSeconds).\(modifiedNanoseconds):\(device):\(inode)" }

    /// Whether this is the file `earlier` was, changed since: written over in place (`cp new old`
    /// truncates and rewrites it), not replaced by another file at its path (renamed over it, a
    /// bundle swapped), which leaves the earlier file as it was for whoever has it open or mapped.
    public func writtenOver(since earlier: FileStamp) -> Bool {
        device == earlier.device && inode == earlier.inode
            && (size != earlier.size || modifiedSeconds != earlier.modifiedSeconds || modifiedNanoseconds != earlier.modifiedNanoseconds)
    }
}
