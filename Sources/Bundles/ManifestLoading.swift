#if canImport(Glibc)
import Glibc
#endif
import LinuxSupport

extension Manifest {
    /// Reads and validates `<bundle>/plugin.json`.
    public static func load(bundle: String) throws(ManifestError) -> Manifest {
        let file = bundle + "/plugin.json"
        let bytes: [UInt8]
        do {
            bytes = try FileSystem.readFile(file, limit: 1 << 20)
        } catch {
            throw ManifestError(file: file, field: nil, reason: "cannot read: \(error)")
        }
        var manifest = try parse(bytes, bundle: bundle, file: file)
        manifest.fingerprint = bytes
        let libraries = [manifest.library.map { ("library", $0) }].compactMap { $0 }
            + manifest.variants.enumerated().map { ("variants[\($0.offset)].library", $0.element.library) }
        for (field, lib) in libraries {
            if let problem = libraryProblem(bundle: bundle, lib) { throw ManifestError(file: file, field: field, reason: problem) }
            if let stamp = FileStamp(path: bundle + "/" + lib) { manifest.fingerprint += Array("\(lib):\(stamp);".utf8) }
        }
        return manifest
    }

    /// Why `lib` (a path inside `bundle`, as the manifest names it) cannot be a plugin's library:
    /// it leads out of the bundle through a link (the worker's sandbox shows it only its bundle,
    /// and the file could be anyone's), or it is not a regular file (a FIFO would hold the worker's
    /// start until its timeout). Nil when it is fine, or missing (the loader names that).
    static func libraryProblem(bundle: String, _ lib: String) -> String? {
        let path = bundle + "/" + lib
        guard FileSystem.exists(path) else { return nil }
        if let real = FileSystem.realPath(path), let home = FileSystem.realPath(bundle), !real.hasPrefix(home + "/") {
            return "'\(lib)' leads out of the bundle (to \(real)): a plugin's worker sees only its own bundle; copy the library in"
        }
        var st = stat()
        guard stat(path, &st) == 0, st.st_mode & S_IFMT != S_IFREG else { return nil }
        return "'\(lib)' is \(FileSystem.kindName(st.st_mode & S_IFMT)), not a regular file"
    }
}
