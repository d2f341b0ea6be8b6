import Bundles
import Confinement
import CSandboxSupport
import LinuxSupport
import PluginProtocol
#if canImport(Glibc)
import Glibc
#endif

/// The installer's own confinement (docs/install.md, "The installer's sandbox"), put on after the
/// request is read (it comes from the supervisor) and before any untrusted byte is parsed:
/// libcurl's HTTP answers, libarchive's archives, manifests and signatures.
///
/// It needs the network (downloads) and must start the preflight worker, which then confines
/// itself further; so its filter is a denylist of the kernel's attack surface, and Landlock does
/// the rest: read only what the operation needs, write only its own output folder, execute only
/// the worker.
enum InstallerSandbox {
    /// The calls the installer never makes, refused with EPERM: other processes' memory, the
    /// kernel's attack surface, mounts, modules, the machine. `execve` stays (the preflight worker)
    /// and `unshare` too (the worker makes its namespaces before its own filter); Landlock limits
    /// exec to the worker.
    static let denied: [String] = [
        "ptrace", "process_vm_readv", "process_vm_writev", "process_madvise", "pidfd_getfd", "kcmp", "bpf",
        "perf_event_open", "keyctl", "add_key", "request_key", "userfaultfd", "io_uring_setup", "io_uring_enter",
        "io_uring_register", "mount", "umount2", "setns", "pivot_root", "chroot", "fsopen", "fsmount", "fspick",
        "move_mount", "open_tree", "mount_setattr", "kexec_load", "kexec_file_load", "init_module", "finit_module",
        "delete_module", "swapon", "swapoff", "reboot", "acct", "iopl", "ioperm", "open_by_handle_at", "quotactl",
        "lookup_dcookie", "execveat", "fork", "vfork",
    ]

    /// The folders the operation writes, created now (Landlock needs them to exist).
    static func writableFolders(_ request: InstallRequest) throws(SystemError) -> [String] {
        let store = BundleStore(home: request.home)
        var folders: [String]
        switch request.operation {
        case .stage, .probe: folders = [store.stagingRoot]
        case .catalog: folders = [request.home + "/cache", request.home + "/state"]
        case .fetch:
            guard let destination = request.destination, let slash = destination.lastIndex(of: "/") else { return [] }
            folders = [String(destination[..<slash])]
        }
        for f in folders { try FileSystem.makeDirectories(f) }
        return folders
    }

    static func apply(_ request: InstallRequest) throws(ConfinementError) -> SandboxReport {
        var applied = SandboxReport()
        guard request.sandbox ?? true else {
            applied.lack(.landlock, "sandbox switched off (--no-sandbox)")
            applied.lack(.seccomp, "sandbox switched off (--no-sandbox)")
            return applied
        }
        let writable: [String]
        do {
            writable = try writableFolders(request)
            if request.operation == .stage || request.operation == .probe {
                try FileSystem.makeDirectories(BundleStore(home: request.home).pluginsDirectory)
            }
            try ProcessControl.setNotDumpable()
        } catch {
            throw ConfinementError(error.description, code: (error as? SystemError)?.errno)
        }
        guard cws_set_rlimit(CWS_RLIMIT_CORE, 0) == 0 else { throw ConfinementError(call: "setrlimit(RLIMIT_CORE)", errno: errno) }
        // Compiled before anything changes, loaded last.
        let filter = try Seccomp.Filter(denied.map { SeccompPolicy.Rule(syscall: $0, action: .errno(EPERM)) }, notify: false,
                                        allowByDefault: true)
        do { try ProcessControl.setNoNewPrivileges() } catch { throw ConfinementError(error.description) }
        applied.add(.noNewPrivs)

        if let abi = ProcessControl.landlockABI().map(Int32.init) {
            _ = try Landlock.apply(rules(request, writable: writable), abi: abi, denyTCP: false, executable: false)
            applied.add(.landlock)
        } else {
            applied.lack(.landlock, "the kernel offers no Landlock (\(ProcessControl.landlockUnavailableReason()))")
        }
        _ = try filter.load()
        applied.add(.seccomp)
        return applied
    }

    /// What the operation may touch. Read-only rules do not allow execution: only the worker and
    /// the ELF interpreter it is started with may be executed.
    static func rules(_ request: InstallRequest, writable: [String]) -> [Landlock.PathRule] {
        var rules = writable.map { Landlock.PathRule(path: $0, writable: true, required: true) }
        rules.append(.init(path: "/dev/null", writable: true, required: false))
        // The preflight worker runs within this domain too: everything its own rules name must be
        // here. It writes its own /proc/self/{uid_map,gid_map,setgroups} and thread names; the
        // kernel's checks (and Landlock's ptrace scope) keep other processes' /proc files out of
        // reach of both.
        rules.append(.init(path: "/proc", writable: true, required: false))
        for folder in SandboxPaths.ownCgroupFolders() {
            for file in SandboxPaths.cgroupFiles { rules.append(.init(path: folder + "/" + file, writable: false, required: false)) }
        }
        for p in SandboxPaths.systemReadOnly + SandboxPaths.networkReadOnly + (request.runtimePaths ?? []) where p != "/proc" {
            rules.append(.init(path: p, writable: false, required: false))
        }
        // A file:// source (an archive, a catalog, a live resource) is read where it is, with the
        // signature beside it; curl opens it in this process.
        for path in [request.source, request.entry?.url, request.url].compactMap({ $0.flatMap(localPath(ofFileURL:)) }) {
            rules.append(.init(path: path, writable: false, required: false))
            rules.append(.init(path: path + ".sig", writable: false, required: false))
        }
        if request.operation == .stage || request.operation == .probe {
            // Installed bundles (the version in place), and a local archive with its signature.
            rules.append(.init(path: BundleStore(home: request.home).pluginsDirectory, writable: false, required: false))
            if let source = request.source, !source.contains("://") {
                rules.append(.init(path: source, writable: false, required: false))
                rules.append(.init(path: source + ".sig", writable: false, required: false))
            }
            if let worker = request.workerExecutable, let real = FileSystem.realPath(worker) {
                rules.append(.init(path: real, writable: false, required: false, executable: true))
            }
            if let interpreter = FileSystem.realPath("/lib64/ld-linux-x86-64.so.2") ?? FileSystem.realPath("/lib/ld-linux-aarch64.so.1") {
                rules.append(.init(path: interpreter, writable: false, required: false, executable: true))
            }
        }
        return rules
    }

    /// The path a `file://` URL names (`file:///srv/a.tar.gz`, `file://localhost/srv/a.tar.gz`),
    /// percent-escapes decoded; nil for any other URL or a local path.
    static func localPath(ofFileURL url: String) -> String? {
        guard url.hasPrefix("file://") else { return nil }
        var rest = Substring(url.dropFirst("file://".count))
        if rest.hasPrefix("localhost/") { rest = rest.dropFirst("localhost".count) }
        guard rest.hasPrefix("/") else { return nil }
        if let end = rest.firstIndex(where: { $0 == "?" || $0 == "#" }) { rest = rest[..<end] }
        var bytes: [UInt8] = []
        var utf8 = Array(rest.utf8)[...]
        while let byte = utf8.popFirst() {
            if byte == UInt8(ascii: "%"), utf8.count >= 2, let value = UInt8(String(decoding: utf8.prefix(2), as: UTF8.self), radix: 16) {
                bytes.append(value)
                utf8 = utf8.dropFirst(2)
            } else {
                bytes.append(byte)
            }
        }
        return String(decoding: bytes, as: UTF8.self)
    }

    /// `probe`: what this sandbox lets through, for each path (errno 0: it opened).
    static func probe(_ paths: [String]) -> Probed {
        func attempt(_ path: String, _ flags: Int32) -> Int32 {
            let fd = open(path, flags | O_CLOEXEC)
            if fd < 0 { return errno }
            close(fd)
            return 0
        }
        let results = paths.map { Probed.Access(path: $0, read: attempt($0, O_RDONLY), write: attempt($0, O_WRONLY)) }
        // chroot is on the denylist (and harmless here: "/" stays "/").
        let rc = chroot("/")
        return Probed(paths: results, chroot: rc == 0 ? 0 : errno)
    }
}
