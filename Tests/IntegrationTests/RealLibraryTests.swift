import Foundation
import PluginProtocol
import Testing

/// SPEC §5: the sandbox holds the libraries real plugins are made of. A C plugin built against
/// Debian's SQLite, OpenSSL, zlib and libpython (Tests/Fixtures/RealLibraries/reallibs.c) does what
/// such code routinely does; every behaviour must pass sandboxed, and the same plugin must pass with
/// `--no-sandbox`, so a failure is the sandbox's and not the fixture's.
@Suite(.serialized) struct RealLibraryTests {
    static let behaviours = ["sqlite", "openssl", "zlib", "threads", "timers", "mlock", "nice", "procexe", "python"]

    static func library() throws -> String {
        let source = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
            .appendingPathComponent("Fixtures/RealLibraries/reallibs.c").path
        let pc = try Shell.run("/usr/bin/pkg-config", ["--cflags", "--libs", "python3-embed", "sqlite3", "libcrypto", "zlib"])
        guard pc.code == 0 else { throw HarnessError("pkg-config cannot find the real libraries (scripts/install-deps.sh installs them): \(pc.err)") }
        let flags = pc.out.split(whereSeparator: { $0 == " " || $0 == "\n" }).map(String.init) + ["-lpthread", "-ldl"]
        return try Build.cLibrary("reallibs", source: try String(contentsOfFile: source, encoding: .utf8), flags: flags)
    }

    @Test("SQLite temp files, OpenSSL, zlib, threads with eventfd/epoll/timerfd, timers, thread names, mlock, nice, /proc/self/exe and CPython work sandboxed and unsandboxed",
          arguments: [true, false])
    func realLibraries(sandboxed: Bool) throws {
        let w = try TestWorld()
        try w.bundle("t.reallibs", library: try Self.library())
        let sv = try RunningSupervisor(w, args: sandboxed ? [] : ["--no-sandbox"])
        for behaviour in Self.behaviours {
            let r = try sv.cli("call", "t.reallibs", behaviour)
            #expect(r.code == 0 && r.out.contains("\"ok\""), "\(behaviour) \(sandboxed ? "sandboxed" : "unsandboxed"): \(r.err)")
        }
        let info = try sv.plugin("t.reallibs")
        #expect(info.state == "running" && info.restarts == 0, "\(info)")
        if sandboxed {
            #expect(info.sandbox.contains("seccomp") && info.sandbox.contains("landlock"), "\(info.sandbox)")
            // Run as root, SQLite gives its journal the owner it has (fchown to itself): a no-op,
            // not a denial to count.
            #expect(info.sandboxDenials?["fchown"] == nil, "\(info.sandboxDenials ?? [:])")
            // What is allowed now is only what reaches this process: the rest stays refused.
            let denied = try sv.cli("call", "t.reallibs", "stillDenied")
            #expect(denied.code == 0 && denied.out.contains("\"ok\""), "\(denied.err)")
        }
        // The private temporary folder is emptied when the plugin stops.
        let temp = w.home + "/tmp/t.reallibs"
        #expect(FileManager.default.fileExists(atPath: temp))
        #expect(try sv.cli("stop").code == 0)
        _ = try sv.waitForExit()
        #expect(!FileManager.default.fileExists(atPath: temp), "\(temp) was not emptied")
    }

    static let fixtures = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
        .appendingPathComponent("Fixtures/RealLibraries").path

    /// The Rust cdylib, built with plain `rustc` (std only; scripts/install-deps.sh installs Debian's
    /// rustc where there is none).
    static func rustLibrary() throws -> String {
        let out = Build.dir + "/fixtures-rust"
        try FileManager.default.createDirectory(atPath: out, withIntermediateDirectories: true)
        let lib = out + "/librustlib.so"
        let r = try Shell.run("/usr/bin/env", ["rustc", "--edition", "2021", "--crate-type", "cdylib", "-O", "-o", lib, fixtures + "/rustlib.rs"],
                              env: ProcessInfo.processInfo.environment)
        guard r.code == 0 else { throw HarnessError("rustc failed (scripts/install-deps.sh installs it): \(r.err)") }
        return lib
    }

    /// The Go c-shared library, built with Debian's golang-go (offline: the standard library only).
    static func goLibrary() throws -> String {
        try Build.goSharedLibrary(fixtures + "/go", into: "fixtures-go", named: "libgoplugin.so")
    }

    @Test("a Rust cdylib: named threads, temp files, available_parallelism, time, a 64 MiB allocation, current_exe and a caught panic work sandboxed and unsandboxed",
          arguments: [true, false])
    func rust(sandboxed: Bool) throws {
        try runAll(library: try Self.rustLibrary(), id: "t.rust", sandboxed: sandboxed,
                   behaviours: ["threads", "tempfile", "parallelism", "time", "alloc", "exe", "panic"])
    }

    @Test("Rust's available_parallelism follows the worker's own cgroup CPU quota (cpuPercent), which its view shows it")
    func rustSeesItsCPUQuota() throws {
        let w = try TestWorld()
        let lib = try Self.rustLibrary()
        try w.bundle("t.quota", library: lib, extra: ["limits": ["cpuPercent": 20]])
        try w.bundle("t.free", library: lib)
        let sv = try RunningSupervisor(w)
        guard try sv.plugin("t.quota").sandbox.contains("cgroup") else { return }  // no group of its own on this host
        let limited = try sv.call("t.quota", "cpus", as: Int.self)
        let free = try sv.call("t.free", "cpus", as: Int.self)
        // A fifth of a CPU rounds up to one; without a quota, std counts the CPUs it may run on.
        #expect(limited == 1, "available_parallelism under cpuPercent 20: \(limited)")
        #expect(free == ProcessInfo.processInfo.activeProcessorCount, "without a quota: \(free)")
    }

    @Test("a Go c-shared library: goroutines, timers, the CPU profiler (it gets samples), temp files, GC and NumCPU work sandboxed and unsandboxed",
          arguments: [true, false])
    func go(sandboxed: Bool) throws {
        try runAll(library: try Self.goLibrary(), id: "t.go", sandboxed: sandboxed,
                   behaviours: ["goroutines", "timers", "profile", "tempfile", "gc", "numcpu"])
    }

    func runAll(library: String, id: String, sandboxed: Bool, behaviours: [String]) throws {
        let w = try TestWorld()
        try w.bundle(id, library: library)
        let sv = try RunningSupervisor(w, args: sandboxed ? [] : ["--no-sandbox"])
        for behaviour in behaviours {
            let r = try sv.cli("call", id, behaviour)
            #expect(r.code == 0 && r.out.contains("\"ok\""), "\(behaviour) \(sandboxed ? "sandboxed" : "unsandboxed"): \(r.err)")
        }
        let info = try sv.plugin(id)
        #expect(info.state == "running" && info.restarts == 0, "\(info)")
        if sandboxed { #expect(info.sandbox.contains("seccomp") && info.sandbox.contains("landlock"), "\(info.sandbox)") }
    }
}
