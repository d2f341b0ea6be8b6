import CLinuxSupport
#if canImport(Glibc)
import Glibc
#endif

/// The system side of upgrading a process in place (docs/operations.md, "Upgrading the
/// supervisor"): the binary checked before it runs, descriptors kept across the exec, the exec
/// itself, and the rescue that brings the previous binary back if the new one fails first.
public enum InPlaceExec {
    /// A binary opened for an exec: the file that was checked is the file that runs, whatever
    /// happens to its path meanwhile.
    public struct Binary: Sendable {
        public let path: String
        /// Open (close-on-exec) until `close`.
        public let fd: Int32
        /// A `#!` script (a wrapper that execs the supervisor): exec'd by its path, since its
        /// interpreter opens it by name.
        public var isScript = false

        public func close() { _ = Glibc.close(fd) }
    }

    /// Why a binary cannot be run in place of this one.
    public struct Unusable: Error, CustomStringConvertible {
        public var description: String
    }

    /// Opens `path` and checks that it is an executable regular file, an ELF binary for the
    /// architecture of this process (read from /proc/self/exe).
    public static func open(_ path: String) throws(Unusable) -> Binary {
        let raw = Glibc.open(path, O_RDONLY | O_CLOEXEC)
        guard raw >= 0 else {
            let e = errno
            throw Unusable(description: e == ENOENT ? "\(path) does not exist" : "cannot open \(path): \(String(cString: strerror(e)))")
        }
        let fd = OwnedDescriptor(raw)
        var info = stat()
        guard fstat(raw, &info) == 0, (info.st_mode & S_IFMT) == S_IFREG else { throw Unusable(description: "\(path) is not a regular file") }
        guard access(path, X_OK) == 0, info.st_mode & 0o111 != 0 else { throw Unusable(description: "\(path) is not executable") }
        if isScript(raw) { return Binary(path: path, fd: fd.release(), isScript: true) }
        guard let theirs = elfMachine(raw) else { throw Unusable(description: "\(path) is neither an ELF binary nor a #! script") }
        let selfFD = Glibc.open("/proc/self/exe", O_RDONLY | O_CLOEXEC)
        defer { if selfFD >= 0 { close(selfFD) } }
        if selfFD >= 0, let ours = elfMachine(selfFD), ours != theirs {
            throw Unusable(description: "\(path) is built for another architecture (ELF class \(theirs.elfClass), machine \(theirs.machine); this one is class \(ours.elfClass), machine \(ours.machine))")
        }
        return Binary(path: path, fd: fd.release())
    }

    /// The running binary, opened (the file this process runs, even if its path has since been
    /// replaced or removed).
    public static func openSelf() throws(Unusable) -> Binary {
        let raw = Glibc.open("/proc/self/exe", O_RDONLY | O_CLOEXEC)
        guard raw >= 0 else { throw Unusable(description: "cannot open /proc/self/exe: \(String(cString: strerror(errno)))") }
        return Binary(path: FileSystem.executablePath(), fd: raw)
    }

    static func isScript(_ fd: Int32) -> Bool {
        var head: [UInt8] = [0, 0]
        return pread(fd, &head, 2, 0) == 2 && head == [0x23, 0x21]
    }

    struct Machine: Equatable {
        var elfClass: UInt8
        var machine: UInt16
    }

    static func elfMachine(_ fd: Int32) -> Machine? {
        var header = [UInt8](repeating: 0, count: 20)
        guard pread(fd, &header, 20, 0) == 20, header[0] == 0x7F, header[1] == 0x45, header[2] == 0x4C, header[3] == 0x46 else { return nil }
        // e_machine at 18, in the file's byte order (EI_DATA: 1 little, 2 big).
        let machine = header[5] == 2 ? UInt16(header[18]) << 8 | UInt16(header[19]) : UInt16(header[19]) << 8 | UInt16(header[18])
        return Machine(elfClass: header[4], machine: machine)
    }

    /// This process's arguments as it was started (/proc/self/cmdline).
    public static func arguments() -> [String] {
        guard let bytes = try? FileSystem.readFile("/proc/self/cmdline", limit: 1 << 20) else { return [] }
        return bytes.split(separator: 0, omittingEmptySubsequences: false).dropLast().map { String(decoding: $0, as: UTF8.self) }
    }

    /// This process's environment (`NAME=value`), without the variables named.
    public static func environment(without names: [String]) -> [String] {
        var out: [String] = []
        var p = environ
        while let entry = p.pointee {
            let s = String(cString: entry)
            if !names.contains(where: { s.hasPrefix($0 + "=") }) { out.append(s) }
            p += 1
        }
        return out
    }

    /// Clears (or sets again) FD_CLOEXEC on each descriptor.
    public static func keepAcrossExec(_ fds: [Int32], _ keep: Bool = true) throws(SystemError) {
        for fd in fds {
            let rc = cls_set_cloexec(fd, keep ? 0 : 1)
            if rc < 0 { throw SystemError(call: "fcntl(F_SETFD)", errno: -rc, context: "descriptor \(fd)") }
        }
    }

    /// Every other descriptor (above stderr) closes at the exec, whoever opened it and how: a
    /// library's descriptor opened without `O_CLOEXEC` is not carried into the next binary.
    public static func closeOthersAtExec(keeping fds: [Int32]) throws(SystemError) {
        let rc = fds.withUnsafeBufferPointer { cls_cloexec_all_but($0.baseAddress, Int32($0.count)) }
        if rc < 0 { throw SystemError(call: "opendir", errno: -rc, context: "/proc/self/fd") }
    }

    /// Runs `binary` in place of this process, with `arguments` and `environment`. Returns only if
    /// the exec failed, with why. Call it from the thread that made every child (`SpawnerThread`).
    public static func exec(_ binary: Binary, arguments: [String], environment: [String]) -> SystemError {
        let rc = Spawner.withCStrings(arguments) { argv in
            Spawner.withCStrings(environment) { envp in
                binary.isScript ? (execve(binary.path, argv, envp) == 0 ? 0 : -errno) : cls_exec_fd(binary.fd, argv, envp)
            }
        }
        return SystemError(call: binary.isScript ? "execve" : "execveat", errno: -rc, context: binary.path)
    }

    /// Everything in `fd` from offset 0 (at most `limit` bytes).
    public static func readAll(_ fd: Int32, limit: Int) throws(SystemError) -> [UInt8] {
        var out: [UInt8] = []
        var chunk = [UInt8](repeating: 0, count: 65536)
        while out.count <= limit {
            let n = pread(fd, &chunk, chunk.count, off_t(out.count))
            if n < 0 {
                if errno == EINTR { continue }
                throw SystemError(call: "pread", errno: errno, context: "descriptor \(fd)")
            }
            if n == 0 { return out }
            out += chunk[0..<n]
        }
        throw SystemError(call: "pread", errno: EFBIG, context: "descriptor \(fd) holds more than \(limit) bytes")
    }

    /// The descriptors of this process that are sockets, by SO_COOKIE: how a socket NIO holds
    /// (which does not say its descriptor) is found, by the cookie read through the channel.
    public static func socketsByCookie() -> [UInt64: Int32] {
        var out: [UInt64: Int32] = [:]
        guard let dir = opendir("/proc/self/fd") else { return out }
        defer { closedir(dir) }
        while let entry = readdir(dir) {
            let name = withUnsafeBytes(of: entry.pointee.d_name) { String(decoding: $0.prefix { $0 != 0 }, as: UTF8.self) }
            guard let fd = Int32(name) else { continue }
            let cookie = cls_socket_cookie(fd)
            if cookie != 0 { out[cookie] = fd }
        }
        return out
    }

    // MARK: The rescue

    /// Until `disarm`, a crash of this binary or `seconds` passing execs `previous` (with this
    /// process's arguments and environment, plus `SP_UPGRADE_FAILED=<why>`): a binary an upgrade
    /// exec'd calls this first of all, and `disarm` once it has taken over.
    public static func armRescue(previous: Int32, seconds: UInt32) throws(SystemError) {
        // Only for a real handover: a stray or forged variable names no open executable file.
        var info = stat()
        guard fstat(previous, &info) == 0, (info.st_mode & S_IFMT) == S_IFREG else {
            throw SystemError(call: "fstat", errno: EBADF, context: "descriptor \(previous), the previous binary")
        }
        let environment = environment(without: ["SP_UPGRADE_FAILED"])
        let args = arguments()
        let rc = Spawner.withCStrings(args.isEmpty ? ["supervisor"] : args) { argv in
            Spawner.withCStrings(environment) { envp in
                cls_rescue_arm(previous, argv, envp, seconds)
            }
        }
        if rc < 0 { throw SystemError(call: "sigaction", errno: -rc, context: "the upgrade's rescue") }
    }

    /// The rescue, now, saying `why`. Returns only if it is not armed or its exec failed.
    public static func fireRescue(_ why: String) {
        _ = cls_rescue_fire(String(why.utf8.prefix(960)) ?? String(why.prefix(200)))
    }

    public static func disarmRescue() { cls_rescue_disarm() }

    /// A fatal signal ends the process at once, with its default action: what `disarmRescue` leaves
    /// after an upgrade, for a supervisor that started without one. (The Swift runtime's crash
    /// handler would otherwise run its backtracer, which cannot read the non-dumpable supervisor
    /// and holds it for good: a watchdog's SIGABRT would leave a supervisor that serves nothing,
    /// with every worker alive. A runtime error's message is written before its trap still.)
    public static func fatalSignalsEndTheProcess() { cls_default_fatal_signals() }
}
