import LinuxSupport

extension PluginCatalog {
    /// The plugins in `directories` (each bundle a folder with a plugin.json), checked as a whole,
    /// with the bundles someone else can write refused (SPEC §9).
    ///
    /// `known`: the plugins a rescan already has (their manifests as they run). What the folders
    /// say never takes a plugin from them by accident: a bundle of the same identifier dropped in
    /// beside a known one is the one ignored (the folders' order decides only among new ones); a
    /// known bundle whose plugin.json cannot be read any more stands in under the identifier it
    /// had, so that it is that plugin which is refused, not a new one named after its folder; and
    /// the known plugins of a folder that cannot be listed (gone, no permission, no descriptor
    /// left) are kept as they are, that folder's fault reported.
    public init(directories: [String], known: [Manifest] = []) {
        var found: [Manifest] = []
        var problems: [String] = []
        // Bundles whose plugin.json cannot be used: listed (after the usable ones, which win a
        // clash of names) as unstartable, with the error and the fix.
        var unusable: [(Manifest, String)] = []
        let knownAt = Dictionary(known.map { ($0.bundle, $0.identifier) }, uniquingKeysWith: { first, _ in first })
        func keepKnown(in dir: String, _ why: String) {
            let real = FileSystem.realPath(dir) ?? dir
            let kept = known.filter { m in [dir, real].contains { m.bundle.hasPrefix($0 + "/") } }
            found += kept
            let names = kept.map(\.identifier).sorted()
            problems.append("\(dir): \(why)" + (names.isEmpty ? "" : "; its plugins keep running as they are (\(names.joined(separator: ", ")))"))
        }
        for dir in directories {
            guard FileSystem.isDirectory(dir) else {
                keepKnown(in: dir, FileSystem.exists(dir) ? "the plugin folder is not a folder" : "plugin folder does not exist")
                continue
            }
            let names: [String]
            do { names = try FileSystem.list(dir) } catch {
                keepKnown(in: dir, "cannot list plugin folder: \(error)")
                continue
            }
            // The likeliest slip: the bundle's own folder given where the folder of bundles goes.
            if FileSystem.hasEntry(dir + "/plugin.json") {
                var bundle = Substring(FileSystem.absolute(dir))
                while bundle.count > 1, bundle.hasSuffix("/") || bundle.hasSuffix("/.") { bundle = bundle.hasSuffix("/") ? bundle.dropLast() : bundle.dropLast(2) }
                let parent = bundle.lastIndex(of: "/").map { String(bundle[..<$0]) }.map { $0.isEmpty ? "/" : $0 } ?? "."
                problems.append("\(dir): holds a plugin.json of its own, and is read as a folder of bundles (one folder each), not as one: give the folder that holds it (\(parent)) as the plugin folder")
            }
            for name in names where !name.hasPrefix(".") {
                let bundle = dir + "/" + name
                // A plugin.json that is a link to nothing (or a loop) is a bundle with an unusable
                // manifest, listed as such: skipped, it would take a running plugin away.
                guard FileSystem.isDirectory(bundle), FileSystem.hasEntry(bundle + "/plugin.json") else { continue }
                let path = FileSystem.realPath(bundle) ?? bundle
                do { found.append(try Manifest.load(bundle: path)) } catch {
                    // Not among `problems`: the stand-in's reason says it where the plugin is listed.
                    let bytes = (try? FileSystem.readFile(path + "/plugin.json", limit: 1 << 20)) ?? []
                    var standIn = Manifest.unusable(bundle: path, bytes: bytes)
                    if let identifier = knownAt[path] { standIn.identifier = identifier }
                    unusable.append((standIn, "\(error.description); fix it, then `supervisor reload`"))
                }
            }
        }
        // The first of a name wins: a known plugin's own bundle first of all, even when its
        // plugin.json cannot be read now.
        let isKnown = { (m: Manifest) in knownAt[m.bundle] == m.identifier }
        let brokenKnown = Dictionary(unusable.filter { isKnown($0.0) }.map { ($0.0.identifier, $0.0.file) }, uniquingKeysWith: { first, _ in first })
        for m in found where !isKnown(m) {
            if let file = brokenKnown[m.identifier] {
                problems.append("\(m.file): field 'identifier': duplicate identifier \(m.identifier), already used by \(file); this bundle is ignored")
            }
        }
        found = found.filter(isKnown) + found.filter { !isKnown($0) && brokenKnown[$0.identifier] == nil }
        unusable = unusable.filter { isKnown($0.0) } + unusable.filter { !isKnown($0.0) }
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
