#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif

/// What the supervisor tells a worker it spawns (passed as JSON in `$SP_WORKER_SPEC`): which library to load
/// for which plugin, and the sandbox to put on before loading it.
public struct WorkerSpec: Codable, Sendable, Equatable {
    /// The environment variable the spec travels in.
    public static let environmentVariable = "SP_WORKER_SPEC"

    public var identifier: String
    public var version: String
    /// Absolute path of the bundle folder.
    public var bundle: String
    /// Absolute path of the shared library to load.
    public var library: String
    /// Absolute path of the plugin's own read-write data folder.
    public var dataDirectory: String
    /// Absolute path of the plugin's live-resources folder (read-only to the worker).
    public var liveDirectory: String?
    /// Absolute path of the worker's private temporary folder (read-write; `TMPDIR`, `SQLITE_TMPDIR`),
    /// emptied by the supervisor when the plugin stops.
    public var tempDirectory: String?
    /// The pid the worker must have as its parent; it exits if the parent is already another.
    public var supervisorPID: Int32
    /// The supervisor's uid and gid: a worker started in a user namespace of its own maps them to
    /// themselves (it cannot learn them itself until they are mapped).
    public var uid: UInt32?
    public var gid: UInt32?
    /// The descriptor number of the protocol socket in the worker.
    public var socketFD: Int32
    /// The descriptor channel (descriptor 4): a second socket to the supervisor that carries
    /// descriptors and short words, never frames of the protocol: the worker's seccomp listener
    /// (worker → supervisor, SCM_RIGHTS), the supervisor's word that the worker joined its cgroup
    /// (`cgroupBySupervisor`), then peer-link orders with their sockets (`peerLinks`). Nil when the
    /// supervisor does not answer for the filter (the worker then names violations itself, from a
    /// SIGSYS handler).
    public var descriptorChannelFD: Int32?
    /// The payload channel (5): the sealed memfds of bytes attached to messages, in both directions
    /// (docs/protocol.md "Bytes"). Whoever sends a message with descriptor attachments first sends
    /// one byte with those descriptors here; whoever reads the message takes them from here. Nil
    /// (a supervisor before it): bytes above 64 KiB cannot reach or leave this worker.
    public var payloadChannelFD: Int32?
    /// The taken page (6, SPEC §15): a sealed memfd of one page the supervisor made and reads; the
    /// worker maps it writable and stores in it the id of each request it hands to its plugin. Nil
    /// (none given): the worker says no `takenPage` in `hello`, and the supervisor counts every call
    /// it sent as possibly started.
    public var takenPageFD: Int32?
    /// The `cgroup.procs` files of the worker's own control group: it writes "0" to each, joining
    /// the group before anything else. Nil when the supervisor has none to give (`cgroupMissing` says why).
    public var cgroupProcs: [String]?
    /// cgroup v1: the `tasks` files of the same group. While the worker has one thread it writes "0"
    /// to these instead of `cgroupProcs`: that moves only the calling thread, which the kernel does
    /// without its global `cgroup_threadgroup_rwsem` and the RCU grace period that lock waits for
    /// (~0.1 ms against ~7–12 ms here); with one thread the whole process moves, and every thread or
    /// process it makes later starts in the group. Nil on cgroup v2, which has no such move.
    public var cgroupTasks: [String]?
    public var cgroupMissing: String?
    /// The folders of the worker's own group that hold the limits runtimes size themselves from
    /// (cgroup v1's `cpu` and `memory` hierarchies, or the one v2 folder): their limit files are in
    /// its sandbox's view, read-only. Nil without a group of its own: the group it starts in.
    public var cgroupFolders: [String]?
    /// The supervisor moves the worker into its group itself and then writes one byte on the
    /// descriptor channel (`descriptorChannelFD`): `J` (joined) or `F` (it failed; the supervisor logs why). The worker
    /// waits for it before anything else (and `cgroupProcs` is then nil).
    public var cgroupBySupervisor: Bool?
    /// Largest frame body accepted.
    public var maxFrameBytes: Int
    /// The largest bytes a call may bring the plugin (SPEC §13, `limits.maxPayloadMB`): a call with
    /// more, from the supervisor or over a link, is answered `badRequest` without reaching it. Nil:
    /// what the supervisor lets through.
    public var maxPayloadBytes: Int?
    /// The supervisor's JSON nesting limit (`maxJSONDepth`), for what the worker routes itself
    /// (peer links); nil: the default.
    public var maxJSONDepth: Int?
    /// The supervisor may hand this worker direct links to other plugins' workers over the descriptor
    /// channel (docs/protocol.md "Peer links"): the worker keeps that descriptor open and serves them.
    public var peerLinks: Bool?
    /// How long, at most, the worker polls its protocol socket before it sleeps (`workerSpinMicroseconds`
    /// in the configuration; nil or 0: it sleeps at once).
    public var spinMicroseconds: Int?
    /// A standby for a restart (docs/architecture.md "Restarts"): spawned while the worker it may
    /// replace is still ending, it puts its sandbox on and then waits, before anything of the plugin
    /// loads, for the frame `{"type":"load"}` on its protocol socket (`MessageKind.load`). At end of
    /// stream instead (the supervisor did not need it) it exits without a word.
    public var standby: Bool?
    /// The supervisor's network namespace (the inode of its /proc/self/ns/net). A worker without
    /// `network` that finds itself in another one was started in an empty one the fork server made
    /// ahead (FS_EMPTY_NETWORK) and makes none of its own; in this one it unshares its own.
    public var hostNetworkNamespace: UInt64?
    /// Sandbox policy input (docs/sandbox.md).
    public var sandbox: SandboxSpec

    public init(identifier: String, version: String, bundle: String, library: String, dataDirectory: String,
                liveDirectory: String? = nil, tempDirectory: String? = nil, supervisorPID: Int32, socketFD: Int32 = 3,
                uid: UInt32? = nil, gid: UInt32? = nil, descriptorChannelFD: Int32? = nil, maxFrameBytes: Int = Frame.defaultMaxBody, sandbox: SandboxSpec = SandboxSpec()) {
        self.identifier = identifier
        self.version = version
        self.bundle = bundle
        self.library = library
        self.dataDirectory = dataDirectory
        self.liveDirectory = liveDirectory
        self.tempDirectory = tempDirectory
        self.supervisorPID = supervisorPID
        self.socketFD = socketFD
        self.uid = uid
        self.gid = gid
        self.descriptorChannelFD = descriptorChannelFD
        self.maxFrameBytes = maxFrameBytes
        self.sandbox = sandbox
    }
}

/// The sandbox a worker applies to itself before loading its plugin.
public struct SandboxSpec: Codable, Sendable, Equatable {
    /// False only for benchmarks and diagnosis (`--no-sandbox`): the worker then runs unconfined and says so.
    public var enabled: Bool
    /// Memory limit in MiB (RLIMIT_DATA, and the supervisor's hard limit); nil for the default (1024).
    public var memoryMB: Int?
    /// RLIMIT_NOFILE.
    public var openFiles: Int?
    /// Manifest permissions, parsed from the manifest.
    public var permissions: [Permission]
    /// Layers the operator demands; the worker refuses to load the plugin if one is unavailable.
    public var required: [SandboxLayer]
    /// Extra read-only paths the runtime needs (the Swift runtime's folder, found by the supervisor).
    public var runtimePaths: [String]
    /// `start --debug <identifier>`: the worker stays dumpable, so a debugger of the same user can
    /// attach to it (docs/debugging.md). Every other layer stays.
    public var debuggable: Bool?
    /// The seccomp filter with a listener for a worker that is pid 1 of its namespace, compiled
    /// once by the supervisor (`SeccompPolicy.rules(network:pid: 1, notify: true)`): the worker
    /// loads it instead of compiling the same rules again. Absent, or not pid 1: it compiles.
    public var seccompProgram: Data?

    public init(enabled: Bool = true, memoryMB: Int? = nil, openFiles: Int? = nil, permissions: [Permission] = [],
                required: [SandboxLayer] = [], runtimePaths: [String] = [], debuggable: Bool? = nil, seccompProgram: Data? = nil) {
        self.enabled = enabled
        self.memoryMB = memoryMB
        self.openFiles = openFiles
        self.permissions = permissions
        self.required = required
        self.runtimePaths = runtimePaths
        self.debuggable = debuggable
        self.seccompProgram = seccompProgram
    }
}
