import LinuxSupport

extension PluginCatalog {
    /// The plugins in `directories` (each bundle a folder with a plugin.json), checked as a whole,
    /// with the bundles someone else can write refused (SPEC §9).
    public init(directories: [String]) {
        var found: [Manifest] = []
        var problems: [String] = []
        // Bundles whose plugin.json cannot be used: listed (after the usable ones, which win a
        // clash of names) as unstartable, with the error and the fix.
        var unusable: [(Manifest, String)] = []
        for dir in directories {
            guard FileSystem.isDirectory(dir) else {
                problems.append("\(dir): plugin folder does not exist")
                continue
            }
            let names: [String]
            do { names = try FileSystem.list(dir) } catch {
                problems.append("\(dir): cannot list plugin folder: \(error)")
                continue
            }
            for name in names where !name.hasPrefix(".") {
                let bundle = dir + "/" + name
                guard FileSystem.isDirectory(bundle), FileSystem.exists(bundle + "/plugin.json") else { continue }
                let path = FileSystem.realPath(bundle) ?? bundle
                do { found.append(try Manifest.load(bundle: path)) } catch {
                    // Not among `problems`: the stand-in's reason says it where the plugin is listed.
                    let bytes = (try? FileSystem.readFile(path + "/plugin.json", limit: 1 << 20)) ?? []
                    unusable.append((Manifest.unusable(bundle: path, bytes: bytes), "\(error.description); fix it, then `supervisor reload`"))
                }
            }
        }
        self.init(manifests: found, problems: problems, unusable: unusable, refusal: BundlePermissions.refusal)
    }

}

extension BundlePermissions {
    /// Why `manifest`'s bundle may not be loaded as its files are (someone else can write them), or nil.
    public static func refusal(_ manifest: Manifest) -> String? {
        let libraries = [manifest.library].compactMap { $0 } + manifest.variants.map(\.library)
        return problem(bundle: manifest.bundle, files: ["plugin.json"] + libraries)
    }
}
