#if canImport(Glibc)
import Glibc
#endif
import LinuxSupport
import PluginProtocol
import Protocol
import SupervisorCore

/// The snapshot's value is the core's (SupervisorCore/Upgrade/UpgradeSnapshot.swift); reading it
/// from the previous binary and what it names on this machine are here.
extension UpgradeSnapshot.Worker {
    /// The worker's control group, as this machine's tree names it.
    var cgroupGroup: CgroupGroup? {
        guard let cgroup, let version = cgroupVersion.flatMap(CgroupTree.Version.init(rawValue:)) else { return nil }
        return CgroupGroup(version: version, folders: cgroup)
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

    /// The config file's text the previous binary ran with, if it had one and kept it.
    public var configText: String? { snapshot.configText }

    /// What `supervisor upgrade-probe` prints: the binary's version and the snapshot formats it reads.
    public static var probeAnswer: String {
        #"{"version":"\#(ProductVersion.current)","snapshotFormats":[\#(Array(UpgradeSnapshot.readable).map(String.init).joined(separator: ","))],"startProbe":true}"#
    }

    /// Set in the environment of a second probe, which runs the binary with the running
    /// supervisor's own arguments (`start ...`), as the exec will: `start` then prints
    /// `probeAnswer` and exits instead of starting. A wrapper script that runs the supervisor for
    /// `upgrade-probe` but not for `start` is found out before the exec, not after it.
    public static let startProbeVariable = "SP_UPGRADE_START_PROBE"
}
