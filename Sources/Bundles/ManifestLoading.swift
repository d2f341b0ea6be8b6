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
        for lib in [manifest.library].compactMap({ $0 }) + manifest.variants.map(\.library) {
            if let stamp = FileStamp(path: bundle + "/" + lib) { manifest.fingerprint += Array("\(lib):\(stamp);".utf8) }
        }
        return manifest
    }
}
