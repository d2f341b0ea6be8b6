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
        guard var current = realPath(path) else { return nil }
        let me = geteuid()
        var isFolder = true
        while true {
            var st = stat()
            guard stat(current, &st) == 0 else { return nil }
            let mode = st.st_mode & 0o7777
            let shown = "mode \(String(mode, radix: 8))"
            if st.st_uid != 0 && st.st_uid != me {
                return "\(current) is owned by uid \(st.st_uid), neither this user (uid \(me)) nor root: its owner could replace what is in it; give a home of your own (--home, or $HOME)"
            }
            if isFolder, mode & 0o022 != 0 {
                return "\(current) is writable by \(mode & 0o002 != 0 ? "every user" : "its group") (\(shown)): another user could put a link where a plugin's data folder goes; `chmod go-w \(current)`"
            }
            if !isFolder, mode & 0o022 != 0, mode & UInt32(S_ISVTX) == 0 {
                return "\(current), a folder above the home, is writable by \(mode & 0o002 != 0 ? "every user" : "its group") without the sticky bit (\(shown)): another user could move the home away and put one of theirs there; give a home elsewhere"
            }
            if current == "/" { return nil }
            let slash = current.lastIndex(of: "/")!
            current = slash == current.startIndex ? "/" : String(current[..<slash])
            isFolder = false
        }
    }
}
