import Bundles
import CArchive
import LinuxSupport
#if canImport(Glibc)
import Glibc
#endif

/// Packs a bundle folder into the archive `supervisor install` takes (`supervisor-installer
/// publish`, docs/install.md#publishing-for-a-fleet): a `.tar.gz` (pax) with one top folder, named
/// after the identifier, holding the bundle's files. Only what the installer would accept goes in:
/// regular files (mode 0755 with any execute bit, else 0644), folders, and symbolic links that stay
/// inside the bundle; entries whose name starts with `.` (`.build`, `.git`, `.swiftpm`) are left out,
/// as the supervisor's scan leaves such folders out. Owners are not recorded and times are the
/// files' own, so the same folder packs to the same bytes.
public struct BundleArchiver: Sendable {
    /// The installer's own bounds (`ArchiveExtractor`): a bundle past them could not be installed.
    public var maxEntries = 10_000
    public var maxTotalBytes: Int64 = 512 << 20

    public init() {}

    /// What goes into the archive: paths relative to the bundle, in the order written (sorted, each
    /// folder before what it holds).
    struct Item {
        enum Kind { case folder, file(size: Int64, executable: Bool), link(target: String) }
        var path: String
        var kind: Kind
        var mtime: Int
    }

    static func refusal(_ bundle: String, _ path: String, _ why: String) -> InstallError {
        InstallError(.archiveRefused, "\(bundle)/\(path): \(why); the installer would refuse the archive")
    }

    /// The bundle's files, checked as the installer will check them.
    func collect(_ bundle: String) throws(InstallError) -> [Item] {
        var items: [Item] = []
        var total: Int64 = 0
        func walk(_ relative: String) throws(InstallError) {
            let folder = relative.isEmpty ? bundle : bundle + "/" + relative
            let names: [String]
            do { names = try FileSystem.list(folder) } catch {
                throw InstallError(.fileSystem, "cannot read the folder \(folder): \(error)")
            }
            for name in names where !name.hasPrefix(".") {
                let path = relative.isEmpty ? name : relative + "/" + name
                var st = stat()
                guard lstat(bundle + "/" + path, &st) == 0 else {
                    throw InstallError(.fileSystem, "cannot read \(bundle)/\(path): \(String(cString: strerror(errno)))")
                }
                if st.st_mode & (S_ISUID | S_ISGID) != 0 {
                    throw Self.refusal(bundle, path, "has the setuid or setgid bit (plugins may not carry privileges)")
                }
                let mtime = Int(st.st_mtim.tv_sec)
                switch st.st_mode & S_IFMT {
                case S_IFDIR:
                    items.append(Item(path: path, kind: .folder, mtime: mtime))
                    try walk(path)
                case S_IFREG:
                    total += Int64(st.st_size)
                    guard total <= maxTotalBytes else {
                        throw Self.refusal(bundle, path, "the bundle's files add up to more than \(maxTotalBytes) bytes")
                    }
                    items.append(Item(path: path, kind: .file(size: Int64(st.st_size), executable: st.st_mode & 0o111 != 0), mtime: mtime))
                case S_IFLNK:
                    guard let target = FileSystem.linkText(bundle + "/" + path) else {
                        throw InstallError(.fileSystem, "cannot read the symbolic link \(bundle)/\(path)")
                    }
                    guard !target.hasPrefix("/") else {
                        throw Self.refusal(bundle, path, "is a symbolic link to the absolute path '\(target)'; copy the file in, or link within the bundle")
                    }
                    guard Self.staysInside(link: path, target: target) else {
                        throw Self.refusal(bundle, path, "is a symbolic link '\(target)' that leaves the bundle")
                    }
                    items.append(Item(path: path, kind: .link(target: target), mtime: mtime))
                default:
                    throw Self.refusal(bundle, path, "is a device node, FIFO or socket")
                }
                guard items.count < maxEntries else {
                    throw Self.refusal(bundle, path, "the bundle has more than \(maxEntries - 1) entries")
                }
            }
        }
        try walk("")
        return items
    }

    /// Whether a link at `link` (relative to the bundle) to the relative `target` resolves inside it.
    static func staysInside(link: String, target: String) -> Bool {
        var parts = link.split(separator: "/").dropLast().map(String.init)
        for part in target.split(separator: "/") {
            switch part {
            case ".": continue
            case "..":
                guard !parts.isEmpty else { return false }
                parts.removeLast()
            default: parts.append(String(part))
            }
        }
        return true
    }

    /// Writes `bundle` as a gzip'd pax tar at `archive` (created with O_EXCL: a fresh temporary
    /// name), its one top folder named `top`.
    public func pack(_ bundle: String, top: String, into archive: String) throws(InstallError) {
        let items = try collect(bundle)
        // Opened before libarchive's handle, so closed after it (its free flushes into the descriptor).
        let fd = open(archive, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0o644)
        guard fd >= 0 else { throw InstallError(.fileSystem, "cannot create \(archive): \(String(cString: strerror(errno)))") }
        defer { close(fd) }
        guard let a = archive_write_new() else { throw InstallError(.internalError, "libarchive: out of memory") }
        defer { archive_write_free(a) }
        func failure(_ what: String) -> InstallError {
            InstallError(.fileSystem, "cannot write the archive \(archive): \(what): \(archive_error_string(a).map { String(cString: $0) } ?? "unknown error")")
        }
        guard archive_write_add_filter_gzip(a) == ARCHIVE_OK,
              archive_write_set_format_pax_restricted(a) == ARCHIVE_OK else { throw failure("libarchive setup") }
        // No time in the gzip header: the same folder packs to the same bytes.
        _ = archive_write_set_options(a, "gzip:!timestamp")
        guard archive_write_open_fd(a, fd) == ARCHIVE_OK else { throw failure("open") }
        guard let entry = archive_entry_new() else { throw InstallError(.internalError, "libarchive: out of memory") }
        defer { archive_entry_free(entry) }
        let buffer = UnsafeMutableRawPointer.allocate(byteCount: 64 * 1024, alignment: 16)
        defer { buffer.deallocate() }
        var topStat = stat()
        let topTime = stat(bundle, &topStat) == 0 ? Int(topStat.st_mtim.tv_sec) : 0
        for item in [Item(path: "", kind: .folder, mtime: topTime)] + items {
            archive_entry_clear(entry)
            archive_entry_set_pathname(entry, item.path.isEmpty ? top : top + "/" + item.path)
            archive_entry_set_mtime(entry, time_t(item.mtime), 0)
            switch item.kind {
            case .folder:
                archive_entry_set_filetype(entry, UInt32(S_IFDIR as mode_t))
                archive_entry_set_perm(entry, 0o755)
            case .file(let size, let executable):
                archive_entry_set_filetype(entry, UInt32(S_IFREG as mode_t))
                archive_entry_set_perm(entry, executable ? 0o755 : 0o644)
                archive_entry_set_size(entry, size)
            case .link(let target):
                archive_entry_set_filetype(entry, UInt32(S_IFLNK as mode_t))
                archive_entry_set_perm(entry, 0o777)
                archive_entry_set_symlink(entry, target)
            }
            guard archive_write_header(a, entry) == ARCHIVE_OK else { throw failure("entry '\(item.path)'") }
            guard case .file(let size, _) = item.kind else { continue }
            let path = bundle + "/" + item.path
            let source = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW)
            guard source >= 0 else { throw InstallError(.fileSystem, "cannot read \(path): \(String(cString: strerror(errno)))") }
            defer { close(source) }
            var written: Int64 = 0
            while true {
                let n = read(source, buffer, 64 * 1024)
                if n < 0, errno == EINTR { continue }
                guard n >= 0 else { throw InstallError(.fileSystem, "cannot read \(path): \(String(cString: strerror(errno)))") }
                if n == 0 { break }
                // The header promised `size` bytes: a file that grew while packed is an error, not a cut.
                guard written + Int64(n) <= size else { throw InstallError(.fileSystem, "\(path) changed while it was packed; try again") }
                guard archive_write_data(a, buffer, n) == n else { throw failure("data of '\(item.path)'") }
                written += Int64(n)
            }
            guard written == size else { throw InstallError(.fileSystem, "\(path) changed while it was packed; try again") }
        }
        guard archive_write_close(a) == ARCHIVE_OK else { throw failure("close") }
        guard fsync(fd) == 0 else { throw InstallError(.fileSystem, "cannot sync \(archive): \(String(cString: strerror(errno)))") }
    }
}
