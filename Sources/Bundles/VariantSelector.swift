import LinuxSupport
#if canImport(Glibc)
import Glibc
#endif

/// Picks the library a bundle loads on this host: its `library`, or the first of its `variants`
/// whose `requires` all hold (`arch`, `kernel` version range, `sandbox` features).
public enum VariantSelector {
    public struct NoMatch: Error, CustomStringConvertible {
        public var file: String
        public var reasons: [String]
        public var description: String {
            "\(file): no variant fits this host:\n" + reasons.map { "  - \($0)" }.joined(separator: "\n")
        }
    }

    public static func choose(_ m: Manifest, sandbox: Bool) throws -> (path: String, variant: String?) {
        if let lib = m.library { return (m.bundle + "/" + lib, nil) }
        let host = HostFacts.current(sandbox: sandbox)
        var reasons: [String] = []
        for v in m.variants {
            var unmet: [String] = []
            for (key, want) in v.requires.sorted(by: { $0.key < $1.key }) {
                if let why = host.unmet(key, want) { unmet.append(why) }
            }
            if unmet.isEmpty { return (m.bundle + "/" + v.library, v.library) }
            reasons.append("\(v.library): " + unmet.joined(separator: "; "))
        }
        throw NoMatch(file: m.file, reasons: reasons)
    }
}

/// What variants can require of the host.
struct HostFacts {
    var arch: String
    var kernel: SemanticVersion?
    var features: Set<String>

    static func current(sandbox: Bool) -> HostFacts {
        var u = utsname()
        uname(&u)
        func field<T>(_ value: T) -> String {
            withUnsafeBytes(of: value) { raw in String(decoding: raw.prefix(while: { $0 != 0 }), as: UTF8.self) }
        }
        let release = field(u.release)
        // "6.1.0-18-amd64" → 6.1.0
        let numeric = release.split(whereSeparator: { !$0.isNumber && $0 != "." }).first.map(String.init) ?? release
        var parts = numeric.split(separator: ".").map(String.init)
        while parts.count < 3 { parts.append("0") }
        let kernel = SemanticVersion(parts.prefix(3).map { String(Int($0) ?? 0) }.joined(separator: "."))
        var features: Set<String> = []
        if sandbox {
            features.insert("seccomp")
            if FileSystem.exists("/sys/kernel/security/landlock") || ProcessControl.landlockABI() != nil { features.insert("landlock") }
        }
        return HostFacts(arch: field(u.machine), kernel: kernel, features: features)
    }

    func unmet(_ key: String, _ want: String) -> String? {
        switch key {
        case "arch":
            let options = want.split(separator: "|").map { $0.trimmingCharacters() }
            return options.contains(arch) ? nil : "needs arch \(want), this host is \(arch)"
        case "kernel":
            guard let range = VersionRange(want) else { return "kernel requirement '\(want)' is not a version range" }
            guard let kernel else { return "kernel version unknown" }
            return range.contains(kernel) ? nil : "needs kernel \(want), this host runs \(kernel)"
        case "sandbox":
            let needed = want.split(separator: ",").map { $0.trimmingCharacters() }
            let missing = needed.filter { !features.contains($0) }
            return missing.isEmpty ? nil : "needs sandbox features \(missing.joined(separator: ", ")), not available here"
        default:
            return "unknown requirement '\(key)' (known: arch, kernel, sandbox)"
        }
    }
}

extension Substring {
    func trimmingCharacters() -> String {
        String(self.drop(while: { $0 == " " }).reversed().drop(while: { $0 == " " }).reversed())
    }
}


/// Where the Swift runtime libraries the worker maps live, for the sandbox's read-only rules: the
/// folders of the loaded libswiftCore, libFoundation* and libdispatch. Asked of the dynamic loader
/// (`dl_iterate_phdr`): reading /proc/self/maps and splitting its lines as Strings cost ~0.5 ms of
/// the supervisor's start.
public enum RuntimeFolders {
    public static func current() -> [String] {
        var folders = Set<String>()
        for path in ProcessControl.loadedObjects() {
            guard let slash = path.lastIndex(of: "/") else { continue }
            let file = path[path.index(after: slash)...]
            if file.hasPrefix("libswiftCore.so") || file.hasPrefix("libFoundation") || file.hasPrefix("libdispatch.so") {
                folders.insert(String(path[..<slash]))
            }
        }
        // As /proc/self/maps would name them: resolved (the loader may have found a library
        // through a symbolic link).
        return Set(folders.map { FileSystem.realPath($0) ?? $0 }).sorted()
    }
}
