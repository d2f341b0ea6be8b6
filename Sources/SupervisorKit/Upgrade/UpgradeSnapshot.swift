#if canImport(Glibc)
import Glibc
#endif
import LinuxSupport
import PluginProtocol
import Protocol
import SupervisorCore

/// What a supervisor hands the binary it execs in an upgrade (docs/operations.md, "Upgrading the
/// supervisor"): its state as values, and the numbers of the descriptors it kept open across the
/// exec (the workers' sockets and pidfds, the listeners, the home's lock). Written as JSON into a
/// sealed memfd; `format` says which layout, and a binary reads every format in `readable` (a newer
/// binary reads the previous one; an older one refuses a newer one, and the supervisor that wrote
/// it carries on).
///
/// Taken only when the supervisor is quiet (no call, event or link order in flight through it,
/// no plugin between two phases), so what a plugin or a client was doing is in its own process.
struct UpgradeSnapshot: Codable, Sendable {
    static let format = 1
    static let readable: ClosedRange<Int> = 1...1

    var format = Self.format
    /// The product version that wrote it.
    var fromVersion: String
    /// CLOCK_MONOTONIC (ns) when the writer stopped reading its sockets: the pause starts there.
    var pausedAtNs: Int64
    /// Upgrades this process went through before this one.
    var upgrades: Int
    var homeLock: Int32
    var controlListener: Int32?
    var metricsListener: Int32?
    var handoff: Handoff?
    /// The previous fork server, ending now that its socket closed with the exec: the new binary
    /// reaps it and starts its own (with the new worker code).
    var oldForkServer: Child?
    /// The previous binary's companions (worker, fork server, worker library, installer): used by
    /// the new binary for any of its own that is not beside it (a supervisor binary copied alone).
    var executables: [String: String] = [:]
    /// The cgroup tree workers' groups are made in (nil: none, `cgroupsMissing` says why).
    var cgroupTree: CgroupTreeState?
    var cgroupsMissing: String
    /// systemd heard READY=1 already.
    var systemdReady: Bool
    /// The supervisor had started every plugin once (`launch` went out).
    var launched: Bool
    /// Who asked for the upgrade, to be answered by whichever binary carries on.
    var requester: Requester?
    var plugins: [Plugin]
    var connections: [Connection]
    var links: [Link]
    var nextLinkNumber: UInt64
    /// The seccomp notifier's descriptors (listeners, or channels a listener is yet to come on).
    var notifier: [Held]

    struct CgroupTreeState: Codable, Sendable {
        var version: String
        var bases: [String: String]
    }

    struct Child: Codable, Sendable {
        var pid: Int32
        var pidfd: Int32
    }

    struct Handoff: Codable, Sendable {
        var listener: Int32
        var offers: [LinkHandoff.Kept]
        var deposits: [LinkHandoff.Kept]
    }

    struct Requester: Codable, Sendable {
        /// Index into `connections`.
        var connection: Int
        var id: UInt64
    }

    struct Plugin: Codable, Sendable {
        var identifier: String
        /// `running`, `failed`, `failedByDependency` (retried when the dependency runs again),
        /// `stopped`, or `restarting` (no worker: a restart was waiting for its delay; the new
        /// binary starts it at once).
        var phase: String
        var restarts: Int
        /// How long ago (ns) each restart still in its restart window happened: the intensity limit
        /// and the backoff go on counting them. Absent from a binary that did not keep them (the
        /// window then starts empty, as it did).
        var restartAgesNs: [Int64]?
        var hasRun: Bool
        var problem: String?
        var lastError: String?
        var lastExit: ExitStatus?
        var sandboxDenials: [String: Int]
        var worker: Worker?
    }

    struct Worker: Codable, Sendable {
        var pid: Int32
        var pidfd: Int32
        var socket: Int32
        /// Bytes read from its socket that did not make a whole frame yet.
        var leftover: [UInt8]
        var descriptorChannel: Int32?
        var payloadChannel: Int32?
        var stdout: Int32?
        var stderr: Int32?
        /// Its cgroup's folders by controller ("" on v2).
        var cgroup: [String: String]?
        var cgroupVersion: String?
        var temporaryFolder: String
        var bundle: String
        var version: String
        var library: String?
        var variant: String?
        var forked: Bool
        var startProblem: String?
        var sandbox: [String]
        var sandboxMissing: [String]
        var timings: [String: Int]
        /// How long it had been running (ns) when the snapshot was taken.
        var ageNs: Int64
        var nextID: UInt64
        var linkedCallees: [String]

        /// Its control group, as the previous binary made it (nil: it had none).
        var cgroupGroup: CgroupGroup? {
            guard let cgroup, let version = cgroupVersion.flatMap(CgroupTree.Version.init(rawValue:)) else { return nil }
            return CgroupGroup(version: version, folders: cgroup)
        }
    }

    struct Connection: Codable, Sendable {
        var fd: Int32
        var leftover: [UInt8]
        var following: [Follow]
        var provides: [String]
        var nextHostCallID: UInt64

        struct Follow: Codable, Sendable {
            var id: UInt64
            var plugin: String?
        }
    }

    struct Link: Codable, Sendable {
        var number: UInt64
        var callee: String
        /// The calling plugin, or (`client`) the index of the calling connection.
        var callerPlugin: String?
        var callerConnection: Int?
    }

    struct Held: Codable, Sendable {
        var pid: Int32
        var fd: Int32
        var isListener: Bool
    }

    /// Every descriptor it names, to keep open across the exec.
    var descriptors: [Int32] {
        var all: [Int32] = [homeLock]
        let listeners: [Int32?] = [controlListener, metricsListener, handoff?.listener, oldForkServer?.pidfd]
        all += listeners.compactMap { $0 }
        all += (handoff?.offers ?? []).map(\.fd) + (handoff?.deposits ?? []).map(\.fd)
        for plugin in plugins {
            guard let w = plugin.worker else { continue }
            let optional: [Int32?] = [w.descriptorChannel, w.payloadChannel, w.stdout, w.stderr]
            all += [w.pidfd, w.socket] + optional.compactMap { $0 }
        }
        all += connections.map(\.fd) + notifier.map(\.fd)
        return all
    }
}

/// A snapshot received from the previous binary, checked: what `Supervisor` resumes from
/// (`supervisor start` reads it from the environment the exec left, `UpgradeHandover.fromEnvironment`).
public struct UpgradeHandover: Sendable {
    let snapshot: UpgradeSnapshot
    /// Set when this binary is the previous one brought back: why the upgrade failed.
    public let failure: String?
    /// The binary that wrote the snapshot, and the snapshot's memfd: kept open until this binary
    /// has taken over (the rescue execs the one with the other), closed then (`tookOver`).
    public let previousBinary: Int32
    let snapshotFD: Int32
    /// CLOCK_MONOTONIC (ns) when this binary read the snapshot: the exec and its own start are
    /// before it, the takeover after it (the log splits the pause so).
    let readAtNs = ProcessControl.monotonicNanoseconds()

    /// `SP_UPGRADE_SNAPSHOT=<snapshot memfd>:<previous binary>` in the environment of a binary an
    /// upgrade exec'd (and of the previous one brought back, with `SP_UPGRADE_FAILED=<why>`).
    public static let environmentVariable = "SP_UPGRADE_SNAPSHOT"
    public static let failureVariable = "SP_UPGRADE_FAILED"

    /// Why a handover cannot be taken: the new binary refuses it, and the previous one comes back.
    public struct Refused: Error, CustomStringConvertible {
        public var description: String
    }

    /// The two descriptors the variable names, before anything is read (the rescue needs the
    /// previous binary's first of all).
    public static func descriptorsFromEnvironment() -> (snapshot: Int32, previousBinary: Int32)? {
        guard let value = ProcessEnvironment.all[environmentVariable] else { return nil }
        let parts = value.split(separator: ":").compactMap { Int32($0) }
        guard parts.count == 2 else { return nil }
        return (parts[0], parts[1])
    }

    /// Reads and checks the snapshot the variable names; nil when there is none (an ordinary start).
    public static func fromEnvironment() throws(Refused) -> UpgradeHandover? {
        guard let fds = descriptorsFromEnvironment() else {
            if let value = ProcessEnvironment.all[environmentVariable] {
                throw Refused(description: "\(environmentVariable)=\(value) does not name two descriptors")
            }
            return nil
        }
        let failure = ProcessEnvironment.all[failureVariable]
        // Not for the children, nor for the next upgrade (the rescue has its own copy).
        unsetenv(environmentVariable)
        unsetenv(failureVariable)
        let bytes: [UInt8]
        do { bytes = try InPlaceExec.readAll(fds.snapshot, limit: 64 << 20) } catch {
            throw Refused(description: "cannot read the snapshot (descriptor \(fds.snapshot)): \(error)")
        }
        let snapshot = try decode(bytes)
        return UpgradeHandover(snapshot: snapshot, failure: failure, previousBinary: fds.previousBinary, snapshotFD: fds.snapshot)
    }

    /// The snapshot in `bytes`, if this binary reads its format.
    static func decode(_ bytes: [UInt8]) throws(Refused) -> UpgradeSnapshot {
        struct Head: Decodable { var format: Int }
        let head: Head
        do { head = try ProtocolJSON.decode(Head.self, from: bytes) } catch {
            throw Refused(description: "the snapshot is not JSON with a format: \(error)")
        }
        guard UpgradeSnapshot.readable.contains(head.format) else {
            throw Refused(description: "the snapshot's format is \(head.format); this binary (\(ProductVersion.current)) reads \(UpgradeSnapshot.readable.lowerBound)...\(UpgradeSnapshot.readable.upperBound)")
        }
        do { return try ProtocolJSON.decode(UpgradeSnapshot.self, from: bytes) } catch {
            throw Refused(description: "the snapshot (format \(head.format)) cannot be read: \(error)")
        }
    }

    /// Points `config` at the previous binary's worker, fork server, worker library and installer
    /// for each of its own that does not exist (this binary was copied somewhere alone); returns
    /// what it took, to log.
    public func fillMissingExecutables(_ config: inout SupervisorConfig) -> [String] {
        var taken: [String] = []
        func fill(_ key: String, _ path: inout String) {
            guard !FileSystem.exists(path), let previous = snapshot.executables[key], FileSystem.exists(previous) else { return }
            taken.append("\(key): \(previous) (none at \(path))")
            path = previous
        }
        fill("worker", &config.workerExecutable)
        fill("forkServer", &config.forkServerExecutable)
        fill("workerLibrary", &config.workerLibrary)
        fill("installer", &config.installerExecutable)
        return taken
    }

    /// This binary has taken over: the rescue is off, and what it needed is closed.
    func tookOver() {
        InPlaceExec.disarmRescue()
        close(snapshotFD)
        close(previousBinary)
    }

    /// Whether this process is the previous binary brought back by a failed upgrade's rescue
    /// (it arms no rescue of its own: there is nothing older to go back to).
    public static var isRescue: Bool { ProcessEnvironment[failureVariable] != nil }

    /// What `supervisor upgrade-probe` prints: the binary's version and the snapshot formats it reads.
    public static var probeAnswer: String {
        #"{"version":"\#(ProductVersion.current)","snapshotFormats":[\#(Array(UpgradeSnapshot.readable).map(String.init).joined(separator: ","))]}"#
    }
}
