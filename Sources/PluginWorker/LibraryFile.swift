#if canImport(Glibc)
import Glibc
#endif

/// What is wrong with a file the loader refused, read from its first bytes: the loader's own words
/// for a text file are "file too short" or "invalid ELF header", and for a library built for
/// another machine "cannot open shared object file: No such file or directory" (it looks for one
/// of the right machine elsewhere).
enum LibraryFile {
    /// The ELF machine this worker runs on (`e_machine`), and its name.
    #if arch(x86_64)
    static let machine: (number: UInt16, name: String) = (62, "x86-64")
    #elseif arch(arm64)
    static let machine: (number: UInt16, name: String) = (183, "AArch64")
    #else
    static let machine: (number: UInt16, name: String) = (0, "this machine")
    #endif

    static let machineNames: [UInt16: String] = [3: "x86 (32-bit)", 8: "MIPS", 20: "PowerPC", 21: "PowerPC64", 22: "s390",
                                                 40: "ARM (32-bit)", 62: "x86-64", 183: "AArch64", 243: "RISC-V", 258: "LoongArch"]

    /// Why the file at `path` cannot be this worker's library, if its first bytes say (or there is
    /// none); nil when they look right (the loader's message then stands) or it cannot be read.
    static func problem(_ path: String) -> String? {
        let fd = open(path, O_RDONLY | O_CLOEXEC)
        guard fd >= 0 else { return errno == ENOENT ? missing(path) : nil }
        defer { close(fd) }
        var header = [UInt8](repeating: 0, count: 64)
        let n = header.withUnsafeMutableBytes { read(fd, $0.baseAddress, 64) }
        guard n >= 0 else { return nil }
        return problem(header: Array(header.prefix(n)))
    }

    /// No file at `path`: the library not built yet, or not copied into the bundle, or named with
    /// another case; the libraries the folder does hold are named.
    static func missing(_ path: String) -> String {
        let slash = path.lastIndex(of: "/")
        let folder = slash.map { String(path[..<$0]) } ?? "."
        let name = slash.map { String(path[path.index(after: $0)...]) } ?? path
        guard let dir = opendir(folder.isEmpty ? "/" : folder) else {
            return "there is no folder \(folder) in the bundle for \(name): build the library and put it where the manifest says"
        }
        // The name in another case first (the likeliest slip), then the first few libraries.
        var sameButCase: String?
        var found: [String] = []
        while let entry = readdir(dir), sameButCase == nil || found.count < 8 {
            let entryName = withUnsafeBytes(of: entry.pointee.d_name) { String(decoding: $0.prefix { $0 != 0 }, as: UTF8.self) }
            if entryName.lowercased() == name.lowercased() { sameButCase = entryName }
            else if found.count < 8, entryName.hasSuffix(".so") || entryName.contains(".so.") { found.append(entryName) }
        }
        closedir(dir)
        let also = (sameButCase.map { [$0] } ?? []) + found.sorted()
        let hint = also.isEmpty ? "the bundle's folder holds no library" : "the bundle's folder holds \(also.prefix(8).joined(separator: ", "))"
        return "there is no file \(name) in the bundle: build the library and put it there under the name the manifest gives (\(hint))"
    }

    static func problem(header: [UInt8]) -> String? {
        if header.isEmpty { return "the file is empty" }
        guard header.count >= 20, header.starts(with: [0x7F, 0x45, 0x4C, 0x46]) else {
            let shown = String(decoding: header.prefix(16).map { (0x20..<0x7F).contains($0) ? $0 : UInt8(ascii: ".") }, as: UTF8.self)
            return "it is not an ELF shared library (it starts with \"\(shown)\")"
        }
        if header[4] != 2 { return "it is a 32-bit library; this worker is 64-bit" }
        if header[5] != 1 { return "it is a big-endian library; this worker is little-endian" }
        let type = UInt16(header[16]) | UInt16(header[17]) << 8
        let machine = UInt16(header[18]) | UInt16(header[19]) << 8
        if machine != Self.machine.number {
            return "it is built for \(machineNames[machine] ?? "ELF machine \(machine)"); this worker runs on \(Self.machine.name)"
        }
        if type != 3 { return type == 2 ? "it is an executable, not a shared library (build it with -shared)" : "it is not a shared library (ELF type \(type))" }
        return nil
    }
}
