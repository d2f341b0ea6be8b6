#if canImport(Glibc)
import Glibc
#endif

extension FileSystem {
    /// Why another user could change what is in the folder at `path` (where a supervisor keeps its
    /// state: plugins' data folders, which its workers get read-write), or nil when none could. It
    /// must be owned by this user or root and writable by no one else; every folder above it too,
    /// but for one writable by others with the sticky bit (as /tmp is), where others cannot rename
    /// or remove what is not theirs. Otherwise another user could put a link where a plugin's data
    /// folder goes, and the plugin would get read-write access to wherever it leads. The path is
    /// looked at as it resolves (its links followed); one that does not exist is nil (said elsewhere).
    public static func writableByOthers(_ path: String) -> String? {
        // The path as given first: a link in it (or a folder a `..` passes through) that another
        // user owns could be pointed elsewhere after the check, whatever it leads to now.
        if let why = linkOfAnother(on: path) { return why }
        guard var current = realPath(path) else { return nil }
        let me = geteuid()
        var isFolder = true
        while true {
            var st = stat()
            guard stat(current, &st) == 0 else { return nil }
            let mode = st.st_mode & 0o7777
            let shown = "mode \(String(mode, radix: 8))"
            if !trusted(st.st_uid, me) {
                return "\(current) is owned by uid \(st.st_uid), neither this user (uid \(me)) nor root: its owner could replace what is in it; give a home of your own (--home, or $HOME)"
            }
            // Writable by its group: by others only when this process is not in that group (a
            // user's private group under umask 002, a pod's fsGroup, OpenShift's gid 0 are ours).
            let others: mode_t = inOurGroups(st.st_gid) ? 0o002 : 0o022
            if isFolder, mode & others != 0 {
                return "\(current) is writable by \(mode & 0o002 != 0 ? "every user" : "its group (gid \(st.st_gid), which this process is not in)") (\(shown)): another user could put a link where a plugin's data folder goes; `chmod go-w \(current)`"
            }
            if !isFolder, mode & others != 0, mode & UInt32(S_ISVTX) == 0 {
                return "\(current), a folder above the home, is writable by \(mode & 0o002 != 0 ? "every user" : "its group (gid \(st.st_gid), which this process is not in)") without the sticky bit (\(shown)): another user could move the home away and put one of theirs there; give a home elsewhere"
            }
            if current == "/" { return nil }
            let slash = current.lastIndex(of: "/")!
            current = slash == current.startIndex ? "/" : String(current[..<slash])
            isFolder = false
        }
    }

    /// A link on `path` (as given, each of its leading parts) that another user than this one or
    /// root owns, or one in a folder others may change (writable by them, without the sticky bit).
    static func linkOfAnother(on path: String) -> String? {
        let me = geteuid()
        var prefix = ""
        for part in absolute(path).split(separator: "/", omittingEmptySubsequences: true) {
            if part == "..", !prefix.isEmpty {
                // Passed through: one its owner could replace with a link.
                var passed = stat()
                if lstat(prefix, &passed) == 0, !trusted(passed.st_uid, me) {
                    return "\(prefix), which the path passes through with '..', is owned by uid \(passed.st_uid): give the home by a path of your own (--home)"
                }
            }
            prefix += "/" + part
            var st = stat()
            guard lstat(prefix, &st) == 0 else { return nil }
            guard st.st_mode & S_IFMT == S_IFLNK else { continue }
            if !trusted(st.st_uid, me) {
                return "\(prefix) is a link owned by uid \(st.st_uid), neither this user (uid \(me)) nor root: its owner could point it elsewhere; give the home by a path of your own (--home)"
            }
            let folder = prefix.lastIndex(of: "/").map { $0 == prefix.startIndex ? "/" : String(prefix[..<$0]) } ?? "/"
            var dir = stat()
            if stat(folder, &dir) == 0, dir.st_mode & 0o022 != 0, dir.st_mode & UInt32(S_ISVTX) == 0 {
                return "\(prefix) is a link in \(folder), which others may change (mode \(String(dir.st_mode & 0o7777, radix: 8))): give the home by a path of your own (--home)"
            }
        }
        return nil
    }

    /// Whether this process is in group `gid` (its effective group or a supplementary one).
    static func inOurGroups(_ gid: gid_t) -> Bool {
        if getegid() == gid { return true }
        let count = getgroups(0, nil)
        guard count > 0 else { return false }
        var groups = [gid_t](repeating: 0, count: Int(count))
        let n = getgroups(count, &groups)
        return n > 0 && groups.prefix(Int(n)).contains(gid)
    }

    /// An owner who cannot be another user of ours: root, this user, or, in a user namespace that
    /// does not map every user (a rootless container), the overflow uid that stands for owners
    /// outside it (the host's root owns `/` there), whom no process inside can act as.
    static func trusted(_ owner: uid_t, _ me: uid_t) -> Bool {
        owner == 0 || owner == me || (owner == overflowUID && !mapsEveryUser)
    }

    static let overflowUID: uid_t = (try? readFile("/proc/sys/kernel/overflowuid", limit: 32))
        .flatMap { UInt32(String(decoding: $0, as: UTF8.self).filter(\.isNumber)) } ?? 65534

    /// Whether this process's user namespace maps every uid (the initial one: `0 0 4294967295`).
    static let mapsEveryUser: Bool = {
        guard let map = try? readFile("/proc/self/uid_map", limit: 4096) else { return true }
        let fields = String(decoding: map, as: UTF8.self).split(whereSeparator: \.isWhitespace)
        return fields.count == 3 && fields[0] == "0" && fields[1] == "0" && fields[2] == "4294967295"
    }()
}
