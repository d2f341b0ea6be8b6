#if canImport(Glibc)
import Glibc
#endif
import LinuxSupport
import PluginProtocol
import SupervisorCore

/// Asks a binary, before the supervisor execs it in place of itself, whether it runs here and which
/// snapshot formats it reads: `<binary> upgrade-probe` prints `UpgradeHandover.probeAnswer`. A binary
/// that crashes, hangs or answers anything else is not exec'd, and nothing changes.
enum UpgradeProbe {
    struct Refusal: Error, CustomStringConvertible {
        var m: String
        var description: String { m }
    }

    struct Answer: Decodable {
        var version: String
        var snapshotFormats: [Int]
        /// It answers the second probe too (`UpgradeHandover.startProbeVariable`); nil from a
        /// binary that does not, which is asked `upgrade-probe` alone.
        var startProbe: Bool?
    }

    /// Runs the probe (by its path: the spawn closes every descriptor above 5) and reads its answer within
    /// `timeoutSeconds`; or says what went wrong. A binary that answers the second probe is then
    /// run as the exec will run it (this supervisor's arguments, `start ...`), and must answer
    /// the same way there: a wrapper that does not run the supervisor for those arguments would
    /// end every plugin with this process.
    static func run(_ binary: InPlaceExec.Binary, timeoutSeconds: Int) -> Result<Answer, Refusal> {
        // With this supervisor's own arguments: the new binary must take them.
        let arguments = Array(InPlaceExec.arguments().dropFirst())
        let first = ask(binary, ["upgrade-probe"] + arguments, what: "`upgrade-probe`", timeoutSeconds: timeoutSeconds)
        guard case .success(let answer) = first, answer.startProbe == true, !arguments.isEmpty else { return first }
        let asStarted = ask(binary, arguments, environment: ["\(UpgradeHandover.startProbeVariable)=1"],
                            what: "`\(arguments.joined(separator: " ").prefix(400))` as the exec will run it", timeoutSeconds: timeoutSeconds)
        guard case .success(let second) = asStarted else { return asStarted }
        guard second.version == answer.version else {
            return .failure(Refusal(m: "\(binary.path) runs \(second.version) for the supervisor's arguments but said \(answer.version) to `upgrade-probe`"))
        }
        return first
    }

    private static func ask(_ binary: InPlaceExec.Binary, _ arguments: [String], environment: [String] = [], what: String,
                            timeoutSeconds: Int) -> Result<Answer, Refusal> {
        let spawned: SpawnedChild
        do {
            spawned = try Spawner.spawn(executable: binary.path, arguments: arguments, extraEnvironment: environment)
        } catch {
            return .failure(Refusal(m: "\(binary.path) cannot be run: \(error)"))
        }
        let process = spawned.process
        let out = spawned.stdout.raw
        var output: [UInt8] = []
        var chunk = [UInt8](repeating: 0, count: 4096)
        // (The probe's stderr is read once it has ended: a short line, well within a pipe's room.)
        let deadline = ProcessControl.monotonicNanoseconds() + Int64(timeoutSeconds) * 1_000_000_000
        var timedOut = false
        while output.count < 65536 {
            let left = deadline - ProcessControl.monotonicNanoseconds()
            if left <= 0 { timedOut = true; break }
            var p = pollfd(fd: out, events: Int16(POLLIN), revents: 0)
            let ready = poll(&p, 1, Int32(min(left / 1_000_000 + 1, 1000)))
            if ready < 0 { if errno == EINTR { continue }; break }
            if ready == 0 { continue }
            let n = read(out, &chunk, chunk.count)
            if n < 0 { if errno == EINTR { continue }; break }
            if n == 0 { break }
            output += chunk[0..<n]
        }
        // The probe leads a process group of its own (it was spawned in a session of its own):
        // what it started goes with it, a hung wrapper's children too.
        if timedOut { _ = kill(-process.pid, SIGKILL) }
        let exit = try? process.wait()
        _ = kill(-process.pid, SIGKILL)
        if timedOut { return .failure(Refusal(m: "\(binary.path) did not answer \(what) within \(timeoutSeconds) s")) }
        guard let exit else { return .failure(Refusal(m: "\(binary.path) ended and could not be waited for")) }
        if exit.signaled { return .failure(Refusal(m: "\(binary.path) crashed (\(exit.signalName)) when asked \(what)")) }
        guard exit.code == 0 else {
            let said = String(decoding: spawned.stderrTail(), as: UTF8.self)
            return .failure(Refusal(m: "\(binary.path) exited with status \(exit.code) when asked \(what)\(said.isEmpty ? "" : ": \(said)")"))
        }
        let line = output.split(separator: 0x0A).last.map(Array.init) ?? []
        guard let answer = try? ProtocolJSON.decode(Answer.self, from: line) else {
            return .failure(Refusal(m: "\(binary.path) is not a supervisor that can take over (its answer when asked \(what) is not one: \(String(decoding: line.prefix(120), as: UTF8.self)))"))
        }
        return .success(answer)
    }
}

extension SpawnedChild {
    /// What the child wrote on stderr, up to 512 bytes, without waiting (it has ended).
    func stderrTail() -> [UInt8] {
        var buffer = [UInt8](repeating: 0, count: 1024)
        let flags = fcntl(stderr.raw, F_GETFL)
        _ = fcntl(stderr.raw, F_SETFL, flags | O_NONBLOCK)
        let n = read(stderr.raw, &buffer, buffer.count)
        guard n > 0 else { return [] }
        return Array(buffer[0..<n]).split(separator: 0x0A).first.map(Array.init) ?? []
    }
}
