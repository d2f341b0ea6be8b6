import PluginProtocol

/// What a supervisor hands the binary it execs in an upgrade (docs/operations.md, "Upgrading the
/// supervisor"): its state as values, and the numbers of the descriptors it kept open across the
/// exec (the workers' sockets and pidfds, the listeners, the home's lock). Written as JSON into a
/// sealed memfd; `format` says which layout, and a binary reads every format in `readable` (a newer
/// binary reads the previous one; an older one refuses a newer one, and the supervisor that wrote
/// it carries on).
///
/// Taken only when the supervisor is quiet (no call, event or link order in flight through it,
/// no plugin between two phases), so what a plugin or a client was doing is in its own process.
package struct UpgradeSnapshot: Codable, Sendable {
    package static let format = 1
    package static let readable: ClosedRange<Int> = 1...1

    package var format = Self.format
    /// The product version that wrote it.
    package var fromVersion: String
    /// CLOCK_MONOTONIC (ns) when the writer stopped reading its sockets: the pause starts there.
    package var pausedAtNs: Int64
    /// Upgrades this process went through before this one.
    package var upgrades: Int
    package var homeLock: Int32
    package var controlListener: Int32?
    package var metricsListener: Int32?
    package var handoff: Handoff?
    /// The previous fork server, ending now that its socket closed with the exec: the new binary
    /// reaps it and starts its own (with the new worker code).
    package var oldForkServer: Child?
    /// The previous binary's companions (worker, fork server, worker library, installer): used by
    /// the new binary for any of its own that is not beside it (a supervisor binary copied alone).
    package var executables: [String: String] = [:]
    /// The cgroup tree workers' groups are made in (nil: none, `cgroupsMissing` says why).
    package var cgroupTree: CgroupTreeState?
    package var cgroupsMissing: String
    /// systemd heard READY=1 already.
    package var systemdReady: Bool
    /// The supervisor had started every plugin once (`launch` went out).
    package var launched: Bool
    /// Who asked for the upgrade, to be answered by whichever binary carries on.
    package var requester: Requester?
    package var plugins: [Plugin]
    package var connections: [Connection]
    package var links: [Link]
    package var nextLinkNumber: UInt64
    /// The seccomp notifier's descriptors (listeners, or channels a listener is yet to come on).
    package var notifier: [Held]
    /// The config file's text the writer ran with (nil: none, or a binary that did not keep it):
    /// a rescued previous binary carries on with it when the file cannot be used any more.
    package var configText: String?
    /// Lifecycle signals that came while the handover was under way, in order: the new binary acts
    /// on them once it has taken over (nil from a binary that did not keep them).
    package var signals: [Int32]?

    package struct CgroupTreeState: Codable, Sendable {
        package var version: String
        package var bases: [String: String]

        package init(version: String, bases: [String: String]) {
            self.version = version
            self.bases = bases
        }
    }

    package struct Child: Codable, Sendable {
        package var pid: Int32
        package var pidfd: Int32

        package init(pid: Int32, pidfd: Int32) {
            self.pid = pid
            self.pidfd = pidfd
        }
    }

    package struct Handoff: Codable, Sendable {
        package var listener: Int32
        package var offers: [Kept]
        package var deposits: [Kept]

        package init(listener: Int32, offers: [Kept], deposits: [Kept]) {
            self.listener = listener
            self.offers = offers
            self.deposits = deposits
        }
    }

    package struct Requester: Codable, Sendable {
        /// Index into `connections`.
        package var connection: Int
        package var id: UInt64

        package init(connection: Int, id: UInt64) {
            self.connection = connection
            self.id = id
        }
    }

    package struct Plugin: Codable, Sendable {
        package var identifier: String
        package var phase: Phase
        package var restarts: Int
        /// How long ago (ns) each restart still in its restart window happened: the intensity limit
        /// and the backoff go on counting them. Absent from a binary that did not keep them (the
        /// window then starts empty, as it did).
        package var restartAgesNs: [Int64]?
        package var hasRun: Bool
        package var problem: String?
        package var lastError: String?
        package var lastExit: ExitStatus?
        package var sandboxDenials: [String: Int]
        package var worker: Worker?
        /// `restarting`: how long (ns) its backoff delay still had to run; the new binary restarts
        /// it after that, not at once. Absent from a binary that did not keep it (then at once).
        package var restartInNs: Int64?
        /// How long ago (ns) its last call, stream or link traffic was: its idle stop (SPEC §16)
        /// counts on from there. Absent from a binary that did not keep it (then from the takeover).
        package var idleNs: Int64?

        package init(identifier: String, phase: Phase, restarts: Int, restartAgesNs: [Int64]? = nil, hasRun: Bool, problem: String? = nil, lastError: String? = nil, lastExit: ExitStatus? = nil, sandboxDenials: [String: Int], worker: Worker? = nil, restartInNs: Int64? = nil, idleNs: Int64? = nil) {
            self.identifier = identifier
            self.phase = phase
            self.restarts = restarts
            self.restartAgesNs = restartAgesNs
            self.hasRun = hasRun
            self.problem = problem
            self.lastError = lastError
            self.lastExit = lastExit
            self.sandboxDenials = sandboxDenials
            self.worker = worker
            self.restartInNs = restartInNs
            self.idleNs = idleNs
        }
    }

    /// A plugin's phase as a snapshot holds it (the JSON strings every binary of format 1 writes
    /// and reads). Taken only when the supervisor is quiet, so no plugin is between two phases:
    /// whatever is not one of these had a restart waiting for its delay.
    package enum Phase: String, Codable, Sendable, CaseIterable {
        /// With its worker, which the new binary adopts.
        case running
        case failed
        /// Failed only because a dependency could not start: retried when that dependency runs.
        case failedByDependency
        case stopped
        /// No worker until something needs it (SPEC §16).
        case inactive
        /// No worker: a restart was waiting for its delay; the new binary restarts it once what
        /// was left of the delay (`restartInNs`) has passed.
        case restarting

        /// How `phase` is written; `hasWorker`: its serving worker is handed over.
        package init(_ phase: PluginPhase, hasWorker: Bool) {
            switch phase {
            case .running where hasWorker: self = .running
            case .failed(let byDependency): self = byDependency ? .failedByDependency : .failed
            case .stopped: self = .stopped
            case .inactive: self = .inactive
            default: self = .restarting
            }
        }

        /// The phase the new binary gives the plugin before anything else happens to it: nil for
        /// `running` (its adopted worker decides) and `restarting` (it starts as a waiting plugin).
        package var restored: PluginPhase? {
            switch self {
            case .running, .restarting: nil
            case .failed: .failed(byDependency: false)
            case .failedByDependency: .failed(byDependency: true)
            case .stopped: .stopped
            case .inactive: .inactive
            }
        }

        /// A name this binary does not know (a snapshot can only come from a binary of the same
        /// format) reads as `restarting`: the plugin starts, as it would have after its delay.
        package init(from decoder: Decoder) throws {
            self = Phase(rawValue: try decoder.singleValueContainer().decode(String.self)) ?? .restarting
        }
    }

    package struct Worker: Codable, Sendable {
        package var pid: Int32
        package var pidfd: Int32
        package var socket: Int32
        /// Bytes read from its socket that did not make a whole frame yet.
        package var leftover: [UInt8]
        package var descriptorChannel: Int32?
        package var payloadChannel: Int32?
        package var stdout: Int32?
        package var stderr: Int32?
        /// Its cgroup's folders by controller ("" on v2).
        package var cgroup: [String: String]?
        package var cgroupVersion: String?
        package var temporaryFolder: String
        package var bundle: String
        package var version: String
        package var library: String?
        package var variant: String?
        package var forked: Bool
        package var startProblem: String?
        package var sandbox: [String]
        package var sandboxMissing: [String]
        package var timings: [String: Int]
        /// How long it had been running (ns) when the snapshot was taken.
        package var ageNs: Int64
        package var nextID: UInt64
        package var linkedCallees: [String]
        /// The methods its plugin declared idempotent in its `hello` (SPEC §15: retried after a
        /// crash); nil from a binary that did not keep them (then only the manifest's count).
        package var idempotent: [String]?
        /// Its taken page's watermark, as far as its word was trusted (SPEC §15), when it keeps the
        /// page's descriptor for the next binary to ask for (`takenPage`); nil: it has none to send,
        /// or its word is not trusted (every call it holds counts as started, as before).
        package var taken: UInt64?
        /// With `taken`: it keeps a mark per link it serves in that page.
        package var linkMarks: Bool?

        package init(pid: Int32, pidfd: Int32, socket: Int32, leftover: [UInt8], descriptorChannel: Int32? = nil, payloadChannel: Int32? = nil, stdout: Int32? = nil, stderr: Int32? = nil, cgroup: [String: String]? = nil, cgroupVersion: String? = nil, temporaryFolder: String, bundle: String, version: String, library: String? = nil, variant: String? = nil, forked: Bool, startProblem: String? = nil, sandbox: [String], sandboxMissing: [String], timings: [String: Int], ageNs: Int64, nextID: UInt64, linkedCallees: [String], idempotent: [String]? = nil, taken: UInt64? = nil, linkMarks: Bool? = nil) {
            self.pid = pid
            self.pidfd = pidfd
            self.socket = socket
            self.leftover = leftover
            self.descriptorChannel = descriptorChannel
            self.payloadChannel = payloadChannel
            self.stdout = stdout
            self.stderr = stderr
            self.cgroup = cgroup
            self.cgroupVersion = cgroupVersion
            self.temporaryFolder = temporaryFolder
            self.bundle = bundle
            self.version = version
            self.library = library
            self.variant = variant
            self.forked = forked
            self.startProblem = startProblem
            self.sandbox = sandbox
            self.sandboxMissing = sandboxMissing
            self.timings = timings
            self.ageNs = ageNs
            self.nextID = nextID
            self.linkedCallees = linkedCallees
            self.idempotent = idempotent
            self.taken = taken
            self.linkMarks = linkMarks
        }
    }

    package struct Connection: Codable, Sendable {
        package var fd: Int32
        package var leftover: [UInt8]
        package var following: [Follow]
        package var provides: [String]
        package var nextHostCallID: UInt64

        package struct Follow: Codable, Sendable {
            package var id: UInt64
            package var plugin: String?

            package init(id: UInt64, plugin: String? = nil) {
                self.id = id
                self.plugin = plugin
            }
        }

        package init(fd: Int32, leftover: [UInt8], following: [Follow], provides: [String], nextHostCallID: UInt64) {
            self.fd = fd
            self.leftover = leftover
            self.following = following
            self.provides = provides
            self.nextHostCallID = nextHostCallID
        }
    }

    package struct Link: Codable, Sendable {
        package var number: UInt64
        package var callee: String
        /// The calling plugin, or (`client`) the index of the calling connection.
        package var callerPlugin: String?
        package var callerConnection: Int?
        /// Its word in the callee's taken page, and the supervisor's duplicate of the callee's end
        /// (held open across the exec) until that word is read at the callee's death.
        package var markSlot: Int?
        package var witness: Int32?

        package init(number: UInt64, callee: String, callerPlugin: String? = nil, callerConnection: Int? = nil, markSlot: Int? = nil, witness: Int32? = nil) {
            self.number = number
            self.callee = callee
            self.callerPlugin = callerPlugin
            self.callerConnection = callerConnection
            self.markSlot = markSlot
            self.witness = witness
        }
    }

    /// A descriptor kept at the handoff socket for a token (`LinkHandoff`), handed to the next binary.
    package struct Kept: Codable, Sendable {
        package var token: String
        package var fd: Int32
        package var tag: UInt64
        package var until: Int64
        /// The client it was offered to (an index into `connections`), which withdraws it when it
        /// goes; nil for a deposit, or from a binary that did not keep it.
        package var connection: Int?

        package init(token: String, fd: Int32, tag: UInt64, until: Int64, connection: Int? = nil) {
            self.token = token
            self.fd = fd
            self.tag = tag
            self.until = until
            self.connection = connection
        }
    }

    package struct Held: Codable, Sendable {
        package var pid: Int32
        package var fd: Int32
        package var isListener: Bool

        package init(pid: Int32, fd: Int32, isListener: Bool) {
            self.pid = pid
            self.fd = fd
            self.isListener = isListener
        }
    }

    /// Every descriptor it names, to keep open across the exec.
    package var descriptors: [Int32] {
        var all: [Int32] = [homeLock]
        let listeners: [Int32?] = [controlListener, metricsListener, handoff?.listener, oldForkServer?.pidfd]
        all += listeners.compactMap { $0 }
        all += (handoff?.offers ?? []).map(\.fd) + (handoff?.deposits ?? []).map(\.fd)
        for plugin in plugins {
            guard let w = plugin.worker else { continue }
            let optional: [Int32?] = [w.descriptorChannel, w.payloadChannel, w.stdout, w.stderr]
            all += [w.pidfd, w.socket] + optional.compactMap { $0 }
        }
        all += connections.map(\.fd) + notifier.map(\.fd) + links.compactMap(\.witness)
        return all
    }

    package init(fromVersion: String, pausedAtNs: Int64, upgrades: Int, homeLock: Int32, controlListener: Int32? = nil, metricsListener: Int32? = nil, handoff: Handoff? = nil, oldForkServer: Child? = nil, executables: [String: String] = [:], cgroupTree: CgroupTreeState? = nil, cgroupsMissing: String, systemdReady: Bool, launched: Bool, requester: Requester? = nil, plugins: [Plugin], connections: [Connection], links: [Link], nextLinkNumber: UInt64, notifier: [Held], signals: [Int32]? = nil, configText: String? = nil) {
        self.fromVersion = fromVersion
        self.pausedAtNs = pausedAtNs
        self.upgrades = upgrades
        self.homeLock = homeLock
        self.controlListener = controlListener
        self.metricsListener = metricsListener
        self.handoff = handoff
        self.oldForkServer = oldForkServer
        self.executables = executables
        self.cgroupTree = cgroupTree
        self.cgroupsMissing = cgroupsMissing
        self.systemdReady = systemdReady
        self.launched = launched
        self.requester = requester
        self.plugins = plugins
        self.connections = connections
        self.links = links
        self.nextLinkNumber = nextLinkNumber
        self.notifier = notifier
        self.signals = signals
        self.configText = configText
    }
}
