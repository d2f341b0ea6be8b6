#if canImport(Glibc)
import Glibc
#endif
import LinuxSupport

/// SPEC §9: a bundle that someone other than the supervisor's user can change is refused, as osquery
/// refuses such extensions: whoever can write a plugin's library can run code in its worker, and
/// replace what the supervisor vouched for at install. Checked on the bundle folder, every folder
/// between it and its files, its plugin.json and its libraries, when the plugin folders are read.
public enum BundlePermissions {
    /// Why the bundle must not be loaded, or nil. Each path must belong to the supervisor's user or
    /// root (an owner may always `chmod` what it owns, so another owner is refused whatever the
    /// mode says); group-writable only when the group is the supervisor's own; never writable by
    /// others. A link is judged by what it leads to.
    public static func problem(bundle: String, files: [String], uid: uid_t = geteuid(), gid: gid_t = getegid()) -> String? {
        var paths = [bundle]
        for file in files {
            // The folders on the way (`sub/` of `sub/lib.so`): whoever can write one can swap the file.
            let parts = file.split(separator: "/").map(String.init)
            for depth in parts.indices { paths.append(bundle + "/" + parts[...depth].joined(separator: "/")) }
        }
        var seen = Set<String>()
        for path in paths where seen.insert(path).inserted {
            var st = stat()
            guard lstat(path, &st) == 0 else { continue }  // a missing library is the loader's error to name
            var what = path == bundle ? "the bundle folder \(path)" : path
            if (st.st_mode & S_IFMT) == S_IFLNK {
                // A link's own mode means nothing (it is always 0777): what it leads to is what
                // could be replaced.
                guard stat(path, &st) == 0 else { continue }
                what += " (a link to \(FileSystem.realPath(path) ?? "?"))"
            }
            let mode = st.st_mode
            if st.st_uid != uid, st.st_uid != 0 {
                return "\(what) belongs to uid \(st.st_uid), who can change it (an owner may always chmod what it owns), not to the supervisor's user (\(uid)) or root: `chown` it"
            }
            if mode & S_IWOTH != 0 {
                return "\(what) is writable by every user (mode \(octal(mode))): anyone could replace the plugin's code; `chmod o-w` it"
            }
            if mode & S_IWGRP != 0, st.st_gid != gid {
                return "\(what) is writable by group \(st.st_gid), not the supervisor's (\(gid)) (mode \(octal(mode))): `chmod g-w` it"
            }
        }
        return nil
    }

    static func octal(_ mode: mode_t) -> String { "0" + String(mode & 0o7777, radix: 8) }
}
