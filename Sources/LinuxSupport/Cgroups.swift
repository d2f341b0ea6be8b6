import CLinuxSupport
import PluginProtocol
import Synchronization
#if canImport(Glibc)
import Glibc
#endif

/// What a worker's control group holds it to.
public struct CgroupLimits: Sendable, Equatable {
    /// memory.max (v2), memory.limit_in_bytes (v1): the kernel reclaims, then OOM-kills, in the group.
    public var memoryMax: Int
    /// memory.high (v2 only): above it the group is throttled and reclaimed, and memory.events
    /// counts `high`.
    public var memoryHigh: Int
    /// pids.max: threads and processes of the group.
    public var pidsMax: Int
    /// cpu.max (v2), cpu.cfs_quota_us (v1): percent of one CPU per 100 ms period (200 = two CPUs).
    public var cpuPercent: Int?

    public init(memoryMax: Int, memoryHigh: Int, pidsMax: Int, cpuPercent: Int?) {
        self.memoryMax = memoryMax
        self.memoryHigh = memoryHigh
        self.pidsMax = pidsMax
        self.cpuPercent = cpuPercent
    }
}

/// The control groups this process may make for its workers (docs/sandbox.md, "cgroups"): a
/// delegated cgroup v2 subtree (systemd's `Delegate=yes`, or a writable cgroup with the memory,
/// pids and cpu controllers), else cgroup v1 hierarchies of those three controllers that this uid
/// may write (root on a v1 or hybrid host). Worker groups are made under one folder per
/// supervisor, `sandboxed-plugins-<pid>`, which goes when the supervisor stops.
public final class CgroupTree: Sendable {
    public enum Version: String, Sendable { case v1, v2 }
    public static let controllers = ["memory", "pids", "cpu"]

    public let version: Version
    /// The folder worker groups are made in, per controller (v2: one, keyed "").
    public let bases: [String: String]
    /// Moves processes into their groups, one after another, on a thread of its own (not a
    /// Dispatch queue: a thread that lives as long as the supervisor, as the child watcher's).
    /// Each move takes the kernel's cgroup_threadgroup_rwsem for writing, which waits for an RCU
    /// grace period (~12 ms here) unless another move just did, and holds up every fork, thread
    /// creation and exit on the machine meanwhile (docs/sandbox.md, "cgroups": the cost at start-up).
    /// Started by the first move asked for: only cgroup v2 asks (on v1 a worker joins its group
    /// itself, by moving its one thread: `CgroupGroup.tasksFiles`).
    /// `wakeWrite`: the pipe's end written one byte per requested move, under the lock; closed (-1)
    /// by `removeAll`. `wakeRead`: the mover thread reads it to wake, and its end of file ends the
    /// thread, which closes it then (`removeAll` does, when no thread was started).
    private let removedAll = Atomic<Bool>(false)
    private let moves: Guarded<(queue: [(pid_t, CgroupGroup, @Sendable (String?) -> Void)], started: Bool, wakeWrite: Int32, wakeRead: Int32)>

    init(version: Version, bases: [String: String]) {
        self.version = version
        self.bases = bases
        var fds: [Int32] = [-1, -1]
        _ = cls_pipe_cloexec(&fds)
        moves = Guarded(([], false, fds[1], fds[0]))
    }

    deinit {
        moves.withLock { m in
            for fd in [m.wakeWrite, m.wakeRead] where fd >= 0 { Glibc.close(fd) }
        }
    }

    private func moveForever() {
        var byte: UInt8 = 0
        let wakeRead = moves.withLock { $0.wakeRead }
        defer {
            moves.withLock { m in
                if m.wakeRead >= 0 { Glibc.close(m.wakeRead) }
                m.wakeRead = -1
            }
        }
        while true {
            let n = Glibc.read(wakeRead, &byte, 1)
            if n < 0 && errno == EINTR { continue }
            guard n == 1 else { return }
            let batch = moves.withLock { m in
                defer { m.queue = [] }
                return m.queue
            }
            for (pid, group, done) in batch { done(group.admit(pid)) }
        }
    }

    /// The tree to use here, or why there is none (for the missing layer's reason).
    /// The tree the previous binary made, after an upgrade in place: detecting again would find
    /// the supervisor in the leaf it moved itself to (v2), where no group can be made.
    public static func adopt(version: Version, bases: [String: String]) -> CgroupTree {
        CgroupTree(version: version, bases: bases)
    }

    public static func detect(pid: pid_t = getpid()) -> (tree: CgroupTree?, reason: String) {
        let own = ownCgroups()
        let mounts = cgroupMounts()
        var reasons: [String] = []
        if let mount = mounts.v2, let path = own[""] {
            switch delegatedV2(mount: mount, path: path, pid: pid) {
            case .success(let tree): return (tree, "")
            case .failure(let why): reasons.append("cgroup v2: \(why.message)")
            }
        } else {
            reasons.append("cgroup v2: not mounted")
        }
        switch writableV1(mounts: mounts.v1, own: own, pid: pid) {
        case .success(let tree): return (tree, "")
        case .failure(let why): reasons.append("cgroup v1: \(why.message)")
        }
        return (nil, reasons.joined(separator: "; ") + " (without a group per worker, rlimits and the supervisor's memory sampler still apply)")
    }

    struct Refusal: Error { var message: String }

    /// v2: our cgroup must offer the controllers and let us write. The supervisor moves itself into
    /// a leaf (`<own>/supervisor`) so that `<own>` may enable the controllers for its children (the
    /// "no internal processes" rule), then makes `<own>/sandboxed-plugins-<pid>` for the workers.
    static func delegatedV2(mount: String, path: String, pid: pid_t) -> Result<CgroupTree, Refusal> {
        let own = mount + (path == "/" ? "" : path)
        let offered = Set(read(own + "/cgroup.controllers")?.split(separator: " ").map(String.init) ?? [])
        let lacking = controllers.filter { !offered.contains($0) }
        guard lacking.isEmpty else {
            return .failure(Refusal(message: "\(own) offers no \(lacking.joined(separator: ", ")) controller (bound to v1, or not delegated)"))
        }
        guard access(own + "/cgroup.subtree_control", W_OK) == 0, access(own + "/cgroup.procs", W_OK) == 0 else {
            return .failure(Refusal(message: "\(own) is not writable by this user (run under systemd with Delegate=yes)"))
        }
        let enable = controllers.map { "+" + $0 }.joined(separator: " ")
        let current = Set(read(own + "/cgroup.subtree_control")?.split(separator: " ").map(String.init) ?? [])
        if !controllers.allSatisfy(current.contains) {
            // A cgroup with processes in it cannot enable controllers for children (but the root).
            if path != "/" {
                let leaf = own + "/supervisor"
                if mkdir(leaf, 0o755) != 0 && errno != EEXIST { return .failure(Refusal(message: "mkdir \(leaf): \(describe(errno))")) }
                if let e = write(leaf + "/cgroup.procs", "\(pid)") { return .failure(Refusal(message: "moving the supervisor to \(leaf): \(e)")) }
            }
            if let e = write(own + "/cgroup.subtree_control", enable) {
                return .failure(Refusal(message: "enabling \(enable) in \(own): \(e) (other processes share the supervisor's cgroup?)"))
            }
        }
        let base = own + "/sandboxed-plugins-\(pid)"
        removeStale(besides: base)
        if mkdir(base, 0o755) != 0 && errno != EEXIST { return .failure(Refusal(message: "mkdir \(base): \(describe(errno))")) }
        if let e = write(base + "/cgroup.subtree_control", enable) {
            _ = rmdir(base)
            return .failure(Refusal(message: "enabling \(enable) in \(base): \(e)"))
        }
        return .success(CgroupTree(version: .v2, bases: ["": base]))
    }

    /// v1: each of memory, pids, cpu mounted, and our group in each writable.
    static func writableV1(mounts: [String: String], own: [String: String], pid: pid_t) -> Result<CgroupTree, Refusal> {
        let lacking = controllers.filter { mounts[$0] == nil }
        guard lacking.isEmpty else { return .failure(Refusal(message: "no \(lacking.joined(separator: ", ")) hierarchy mounted")) }
        var bases: [String: String] = [:]
        for c in controllers {
            let path = own[c] ?? "/"
            let base = mounts[c]! + (path == "/" ? "" : path) + "/sandboxed-plugins-\(pid)"
            removeStale(besides: base)
            if mkdir(base, 0o755) != 0 && errno != EEXIST {
                let e = errno
                for made in bases.values { _ = rmdir(made) }
                return .failure(Refusal(message: "mkdir \(base): \(describe(e))"))
            }
            bases[c] = base
        }
        return .success(CgroupTree(version: .v1, bases: bases))
    }

    /// Removes the folders of supervisors that are gone (killed with SIGKILL, they could not):
    /// `sandboxed-plugins-<pid>` beside `base` whose pid is not alive, with their (empty) groups.
    static func removeStale(besides base: String) {
        let parent = String(base[..<(base.lastIndex(of: "/") ?? base.startIndex)])
        for name in (try? FileSystem.list(parent)) ?? [] where name.hasPrefix("sandboxed-plugins-") {
            guard let pid = Int32(name.dropFirst("sandboxed-plugins-".count)), kill(pid, 0) != 0, errno == ESRCH else { continue }
            let stale = parent + "/" + name
            for group in (try? FileSystem.list(stale)) ?? [] where FileSystem.isDirectory(stale + "/" + group) { _ = rmdir(stale + "/" + group) }
            _ = rmdir(stale)
        }
    }

    /// A new group named `name` with `limits`, or nil when a group of that name exists already: it
    /// is another worker's (one adopted by an upgrade, or still being removed), and is neither
    /// shared nor touched. Throws what could not be made or set (what this made is removed).
    ///
    /// On v1 a worker without a CPU limit gets no `cpu` group: it would set nothing, and each one
    /// costs the kernel an offline pass when removed (~5 ms of a kworker here; a stop of 1,000
    /// plugins waited ~0.3 s on them). Its `cpu` folder is then the supervisor's, unlimited, which
    /// is what a runtime reading `cpu.cfs_quota_us` finds in an empty group too.
    public func makeGroup(_ name: String, limits: CgroupLimits) throws(SystemError) -> CgroupGroup? {
        let used = bases.filter { version == .v2 || $0.key != "cpu" || limits.cpuPercent != nil }
        let group = CgroupGroup(version: version, folders: used.mapValues { $0 + "/" + name })
        var made: [String] = []
        for folder in Set(group.folders.values) {
            if mkdir(folder, 0o755) == 0 {
                made.append(folder)
                continue
            }
            let e = errno
            for folder in made { _ = rmdir(folder) }
            if e == EEXIST { return nil }
            throw SystemError(call: "mkdir", errno: e, context: folder)
        }
        do { try group.apply(limits) } catch {
            group.remove()
            throw error
        }
        return group
    }

    /// Moves `pid` into `group` on the mover's thread, then calls `done` there with nil or why not.
    public func admit(_ pid: pid_t, to group: CgroupGroup, done: @escaping @Sendable (String?) -> Void) {
        let start = moves.withLock { m -> Bool? in
            guard m.wakeWrite >= 0 else { return nil }
            m.queue.append((pid, group, done))
            var byte: UInt8 = 1
            _ = Glibc.write(m.wakeWrite, &byte, 1)
            defer { m.started = true }
            return !m.started
        }
        guard let start else {
            // Closed by `removeAll`, or never made (no descriptor left for the pipe at start).
            return done(removedAll.load(ordering: .relaxed) ? "the supervisor is stopping" : "the cgroup mover has no pipe to be woken by")
        }
        if start { Threads.start(name: "cgroup-mover") { [self] in moveForever() } }
    }

    /// Removes the per-supervisor folders (empty once every worker is gone), and ends the mover's
    /// thread: the tree is done with (an embedded host's program goes on without its thread and pipe).
    public func removeAll() {
        removedAll.store(true, ordering: .relaxed)
        moves.withLock { m in
            if m.wakeWrite >= 0 { Glibc.close(m.wakeWrite) }
            m.wakeWrite = -1
            // No thread to see the end of file: the read end goes now.
            if !m.started, m.wakeRead >= 0 { Glibc.close(m.wakeRead) }
            if !m.started { m.wakeRead = -1 }
        }
        for base in Set(bases.values) {
            for name in (try? FileSystem.list(base)) ?? [] where FileSystem.isDirectory(base + "/" + name) { _ = rmdir(base + "/" + name) }
            _ = rmdir(base)
        }
    }

    static func describe(_ e: Int32) -> String { String(cString: strerror(e)) }
}

/// One worker's control group: a folder per controller (v1) or one folder (v2).
public struct CgroupGroup: Sendable {
    public let version: CgroupTree.Version
    /// Its folder for each controller ("" on v2).
    public let folders: [String: String]

    /// A group the previous binary made, named by its folders (an upgrade in place).
    public init(version: CgroupTree.Version, folders: [String: String]) {
        self.version = version
        self.folders = folders
    }

    /// The `cgroup.procs` files the worker writes "0" to, to join the group itself (before it
    /// loads any plugin code, so everything it allocates is charged there).
    public var procsFiles: [String] { files("cgroup.procs") }

    /// v1's `tasks` files, which a process of one thread writes "0" to instead: it moves only that
    /// thread, so the kernel takes no global lock and waits for no grace period (WorkerSpec.cgroupTasks).
    /// Nil on v2 (`cgroup.threads` moves threads only within one threaded subtree).
    public var tasksFiles: [String]? { version == .v1 ? files("tasks") : nil }

    /// The file `name` in each of the group's folders.
    private func files(_ name: String) -> [String] { Set(folders.values).sorted().map { $0 + "/" + name } }

    func folder(_ controller: String) -> String? { folders[version == .v2 ? "" : controller] }

    /// The folders holding the limits a runtime reads to size its threads and heap (the `cpu` and
    /// `memory` controllers'; v2: the group's one folder).
    public var limitFolders: [String] { Array(Set(["cpu", "memory"].compactMap(folder))).sorted() }

    /// Moves the process `pid` (all its threads) into the group; nil, or why not.
    func admit(_ pid: pid_t) -> String? {
        for file in procsFiles {
            if let e = CgroupTree.write(file, String(pid)) { return "\(file): \(e)" }
        }
        return nil
    }

    func apply(_ l: CgroupLimits) throws(SystemError) {
        func set(_ controller: String, _ file: String, _ value: String) throws(SystemError) {
            guard let folder = folder(controller) else { return }
            if let e = CgroupTree.write(folder + "/" + file, value) {
                throw SystemError(call: "write", errno: EINVAL, context: "\(folder)/\(file) = \(value): \(e)")
            }
        }
        let period = 100_000
        switch version {
        case .v2:
            try set("memory", "memory.max", String(l.memoryMax))
            try set("memory", "memory.high", String(l.memoryHigh))
            try set("pids", "pids.max", String(l.pidsMax))
            if let pct = l.cpuPercent { try set("cpu", "cpu.max", "\(pct * period / 100) \(period)") }
        case .v1:
            try set("memory", "memory.limit_in_bytes", String(l.memoryMax))
            try set("pids", "pids.max", String(l.pidsMax))
            if let pct = l.cpuPercent {
                try set("cpu", "cpu.cfs_period_us", String(period))
                try set("cpu", "cpu.cfs_quota_us", String(pct * period / 100))
            }
        }
    }

    /// How often the group went over memory.high (v2's memory.events `high`); nil on v1.
    public func memoryHighEvents() -> Int? {
        guard version == .v2, let folder = folder("memory") else { return nil }
        return Self.counter(CgroupTree.read(folder + "/memory.events"), "high")
    }

    /// How many processes the kernel's OOM killer ended in the group (memory.events or
    /// memory.oom_control `oom_kill`).
    public func oomKills() -> Int? {
        guard let folder = folder("memory") else { return nil }
        let file = version == .v2 ? "/memory.events" : "/memory.oom_control"
        return Self.counter(CgroupTree.read(folder + file), "oom_kill")
    }

    /// Whether the group's usage ever reached its own memory limit (v2's memory.events `max`, v1's
    /// memory.failcnt); nil where it cannot be read. An OOM kill in a group that never reached it
    /// came from around it: the machine, or a group the supervisor itself runs in.
    public func reachedMemoryLimit() -> Bool? {
        guard let folder = folder("memory") else { return nil }
        let count = version == .v2 ? Self.counter(CgroupTree.read(folder + "/memory.events"), "max")
            : CgroupTree.read(folder + "/memory.failcnt").flatMap { $0.split(separator: "\n").first.flatMap { Int($0) } }
        return count.map { $0 > 0 }
    }

    /// The memory charged to the group that the kernel cannot take back by dropping file pages:
    /// its anonymous and shared-memory pages (memory.stat `anon` + `shmem` on v2, `rss` + `shmem`
    /// on v1). Not the pages of files it maps, nor a memfd another process wrote and handed it (a
    /// page is charged to the group that first touched it); nil without a memory controller.
    public func memoryHeld() -> Int? {
        guard let folder = folder("memory"), let text = CgroupTree.read(folder + "/memory.stat"),
              let anonymous = Self.counter(text, version == .v2 ? "anon" : "rss"), let shared = Self.counter(text, "shmem") else { return nil }
        return anonymous + shared
    }

    static func counter(_ text: String?, _ key: String) -> Int? {
        for line in (text ?? "").split(separator: "\n") {
            let kv = line.split(separator: " ")
            if kv.count == 2, kv[0] == key { return Int(kv[1]) }
        }
        return nil
    }

    /// Removes the group (it must hold no process: call once the worker has been reaped).
    public func remove() {
        for folder in Set(folders.values) { _ = rmdir(folder) }
    }
}

extension String {
    func trimmingWhitespace() -> String {
        var s = Substring(self)
        while let c = s.last, c == "\n" || c == " " || c == "\t" { s = s.dropLast() }
        while let c = s.first, c == "\n" || c == " " || c == "\t" { s = s.dropFirst() }
        return String(s)
    }
}
