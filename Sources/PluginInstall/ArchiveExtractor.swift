import Bundles
import CArchive
#if canImport(Glibc)
import Glibc
#endif

/// Unpacks a plugin archive (tar, tar.gz, tar.xz, tar.zst, zip) with libarchive, refusing anything
/// that could reach outside the bundle or smuggle in privileges: absolute paths, `..`, symbolic
/// links that leave the bundle or that later entries would write through, hard links, devices,
/// FIFOs, sockets, setuid/setgid bits; and bounding the total size and the number of entries
/// (counted as written, not as the headers claim).
public struct ArchiveExtractor: Sendable {
    public var maxTotalBytes: Int64 = 512 << 20
    public var maxEntries = 10_000

    public init() {}

    /// Why an archive is refused: `archiveRefused`, naming the archive and the entry.
    static func refusal(archive: String, entry: String?, reason: String) -> InstallError {
        InstallError(.archiveRefused, "archive \(archive) refused" + (entry.map { ": entry '\($0)'" } ?? "") + ": \(reason)")
    }

    /// Extracts `archive` into `destination` (an empty folder). Throws on the first bad entry;
    /// the caller deletes the destination.
    /// `name` is how errors call the archive (its source, not the staging copy).
    /// Returns the symbolic links it made (path in the archive → target): where each leads, relative
    /// to the bundle's own folder, is checked once that folder is known (`linkLeaving`).
    @discardableResult
    public func extract(_ path: String, into destination: String, name archive: String? = nil) throws(InstallError) -> [String: String] {
        let archive = archive ?? path
        guard let a = archive_read_new() else { throw Self.refusal(archive: archive, entry: nil, reason: "libarchive: out of memory") }
        defer { archive_read_free(a) }
        // The compressions SPEC §9 names, all built into libarchive (filter_all would also run
        // external decompressor programs from the unsandboxed supervisor).
        archive_read_support_filter_gzip(a)
        archive_read_support_filter_xz(a)
        archive_read_support_filter_zstd(a)
        archive_read_support_format_tar(a)
        archive_read_support_format_gnutar(a)
        archive_read_support_format_zip(a)
        guard archive_read_open_filename(a, path, 64 * 1024) == ARCHIVE_OK else {
            throw Self.refusal(archive: archive, entry: nil, reason: "not a readable archive: \(Self.error(a))")
        }
        var total: Int64 = 0
        var count = 0
        /// Each symbolic link made so far, by its path in the bundle, with its target.
        var links: [String: String] = [:]
        var entry: OpaquePointer?
        while true {
            let rc = archive_read_next_header(a, &entry)
            if rc == ARCHIVE_EOF { break }
            guard rc == ARCHIVE_OK || rc == ARCHIVE_WARN, let entry else {
                throw Self.refusal(archive: archive, entry: nil, reason: "corrupt or truncated: \(Self.error(a))")
            }
            let name = archive_entry_pathname(entry).map { String(cString: $0) } ?? ""
            func refuse(_ why: String) -> InstallError { Self.refusal(archive: archive, entry: name, reason: why) }
            count += 1
            guard count <= maxEntries else { throw refuse("more than \(maxEntries) entries") }
            let path = try Self.normalized(name, refuse)
            if path.isEmpty { continue }  // "./"
            for prefix in Self.prefixes(of: path) where links[prefix] != nil {
                throw refuse("writes through the symbolic link '\(prefix)'")
            }
            if archive_entry_hardlink(entry) != nil { throw refuse("hard links are not allowed") }
            let mode = archive_entry_mode(entry)
            if mode & 0o6000 != 0  /* S_ISUID | S_ISGID */ { throw refuse("setuid/setgid bits are not allowed") }
            let target = destination + "/" + path
            switch archive_entry_filetype(entry) {
            case 0o040000:  // AE_IFDIR
                try Self.makeDirectory(target, refuse)
            case 0o100000:  // AE_IFREG
                try Self.makeDirectory(String(target[..<target.lastIndex(of: "/")!]), refuse)
                let fd = open(target, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, (mode & 0o111) != 0 ? 0o755 : 0o644)
                guard fd >= 0 else { throw Self.notCreated(target, archive: archive, refuse) }
                defer { close(fd) }
                var buffer = [UInt8](repeating: 0, count: 64 * 1024)
                while true {
                    let n = buffer.withUnsafeMutableBytes { archive_read_data(a, $0.baseAddress, $0.count) }
                    if n == 0 { break }
                    guard n > 0 else { throw refuse("corrupt or truncated data: \(Self.error(a))") }
                    total += Int64(n)
                    guard total <= maxTotalBytes else { throw refuse("unpacks to more than \(maxTotalBytes) bytes") }
                    // The disk's fault, not the archive's (full, say): `fileSystem`, with the errno
                    // of the write that failed (a short write goes on with the rest first).
                    var done = 0
                    while done < n {
                        let written = buffer.withUnsafeBytes { write(fd, $0.baseAddress! + done, n - done) }
                        if written < 0, errno == EINTR { continue }
                        guard written > 0 else {
                            let reason = written < 0 ? String(cString: strerror(errno)) : "nothing written"
                            throw InstallError(.fileSystem, "cannot write \(target) (unpacking \(archive)): \(reason)")
                        }
                        done += written
                    }
                }
            case 0o120000:  // AE_IFLNK
                let linkTarget = archive_entry_symlink(entry).map { String(cString: $0) } ?? ""
                guard !linkTarget.hasPrefix("/") else { throw refuse("symbolic link to the absolute path '\(linkTarget)'") }
                links[path] = linkTarget
                guard Self.resolve(path, links: links) != nil else { throw refuse("symbolic link '\(linkTarget)' leaves the bundle") }
                try Self.makeDirectory(String(target[..<target.lastIndex(of: "/")!]), refuse)
                guard symlink(linkTarget, target) == 0 else { throw Self.notCreated(target, archive: archive, refuse) }
            default:
                throw refuse("device nodes, FIFOs and sockets are not allowed")
            }
        }
        // Again with every link made: a link made later can take an earlier one out (`a -> b/x`,
        // then `b -> ../..`).
        if let (path, linkTarget) = Self.linkLeaving([], links: links) {
            throw Self.refusal(archive: archive, entry: path, reason: "symbolic link '\(linkTarget)' leaves the bundle (through the archive's other links)")
        }
        return links
    }

    /// The first link (by path) that leads out of the folder `bundle` (its path's parts; empty: the
    /// archive's root), following the archive's `links`; nil when none does.
    public static func linkLeaving(_ bundle: [String], links: [String: String]) -> (path: String, target: String)? {
        links.sorted { $0.key < $1.key }.first { resolve($0.key, links: links, within: bundle) == nil }.map { ($0.key, $0.value) }
    }

    /// Where the link at `path` leads (its parts), following the archive's links (`links`: path →
    /// target) as the kernel would; nil when it leaves the folder `bundle` (its parts, a prefix of
    /// `path`'s), or goes round more than 40 links (a loop). A link to a path that does not exist
    /// inside is fine.
    static func resolve(_ path: String, links: [String: String], within bundle: [String] = []) -> [String]? {
        guard let first = links[path] else { return nil }
        var resolved = path.split(separator: "/").dropLast().map(String.init)
        guard resolved.starts(with: bundle) else { return nil }
        var pending = first.split(separator: "/").map(String.init)[...]
        var hops = 1
        while let part = pending.popFirst() {
            if part == "." { continue }
            if part == ".." {
                guard resolved.count > bundle.count else { return nil }
                resolved.removeLast()
                continue
            }
            resolved.append(part)
            guard let next = links[resolved.joined(separator: "/")] else { continue }
            hops += 1
            guard hops <= 40, !next.hasPrefix("/") else { return nil }
            resolved.removeLast()
            pending = (next.split(separator: "/").map(String.init) + pending)[...]
        }
        return resolved
    }

    /// `name` without `./`, refusing absolute paths and `..`.
    static func normalized(_ name: String, _ refuse: (String) -> InstallError) throws(InstallError) -> String {
        guard !name.hasPrefix("/") else { throw refuse("absolute path") }
        var parts: [Substring] = []
        for part in name.split(separator: "/") where part != "." {
            guard part != ".." else { throw refuse("path with '..'") }
            parts.append(part)
        }
        return parts.joined(separator: "/")
    }

    static func prefixes(of path: String) -> [String] {
        let parts = path.split(separator: "/")
        return (1..<max(parts.count, 1)).map { parts[0..<$0].joined(separator: "/") }
    }

    static func makeDirectory(_ path: String, _ refuse: (String) -> InstallError) throws(InstallError) {
        var current = ""
        for part in path.split(separator: "/") {
            current += "/" + part
            if mkdir(current, 0o755) != 0 && errno != EEXIST { throw notCreated(current, archive: nil, refuse) }
        }
    }

    /// Why `path` could not be made (`errno` as the call left it): the disk's or the system's fault
    /// (full, out of inodes or quota, read-only, an I/O error, out of descriptors or memory, not
    /// allowed) is `fileSystem`, naming the path; anything else (an entry twice, a name too long)
    /// is the archive's, refused.
    public static func notCreated(_ path: String, archive: String?, _ refuse: (String) -> InstallError) -> InstallError {
        let code = errno
        let reason = String(cString: strerror(code))
        guard [ENOSPC, EDQUOT, EROFS, EIO, EMFILE, ENFILE, ENOMEM, EACCES, EPERM].contains(code) else {
            return refuse("cannot create \(path): \(reason)")
        }
        return InstallError(.fileSystem, "cannot create \(path)\(archive.map { " (unpacking \($0))" } ?? ""): \(reason)")
    }

    static func error(_ a: OpaquePointer) -> String {
        archive_error_string(a).map { String(cString: $0) } ?? "unknown error"
    }
}
