import PluginProtocol

/// Names the cause of a worker's end (SPEC §8) from what is known of it. Pure, unit-tested.
package enum ExitClassifier {
    package struct Facts {
        package var exit: WorkerExit
        /// What the worker said before ending itself (believed only with the matching exit code).
        package var notice: ExitNotice?
        /// Why the supervisor killed it, if it did.
        package var killed: (reason: ExitReason, message: String)?
        /// The forbidden syscall its filter handed to the supervisor, which then killed it.
        package var violation: String? = nil
        package var stopRequested = false
        /// Its last sampled data size and its hard memory limit, in bytes.
        package var lastDataBytes = 0
        package var hardLimitBytes = Int.max
        /// Its library, when that file changed in place while it ran.
        package var libraryChanged: String? = nil
        /// It was running (said hello and started) before it ended.
        package var ran = true

        package init(exit: WorkerExit, notice: ExitNotice? = nil, killed: (reason: ExitReason, message: String)? = nil, violation: String? = nil,
                     stopRequested: Bool = false, lastDataBytes: Int = 0, hardLimitBytes: Int = .max, libraryChanged: String? = nil, ran: Bool = true) {
            self.exit = exit
            self.notice = notice
            self.killed = killed
            self.violation = violation
            self.stopRequested = stopRequested
            self.lastDataBytes = lastDataBytes
            self.hardLimitBytes = hardLimitBytes
            self.libraryChanged = libraryChanged
            self.ran = ran
        }
    }

    /// What an end that was no stop's says when it came while the worker was being stopped.
    package static let whileStopping = "while it was being stopped"

    /// The safe ways to replace a plugin's library, for the `libraryReplaced` message.
    package static let replaceAdvice = "write the new library to another file and rename it over the old one (the running worker keeps the old file), or use `supervisor install` (docs/abi.md#replacing-a-library)"

    package static func classify(_ f: Facts) -> ExitStatus {
        var exit = f.exit
        if let notice = f.notice, notice.reason == .signaled, let name = notice.signal, !exit.signaled,
           let number = LinuxSignal.number(name), exit.code == 128 + number {
            // PID 1 of its namespace reported the signal it dies of, and exited with 128 + it: as if
            // the signal had ended it (a plugin gains nothing by forging this: it could raise it).
            exit.code = number
            exit.signaled = true
        }
        var status = exit.signaled ? ExitStatus(signal: LinuxSignal.name(exit.code), reason: .signaled) : ExitStatus(code: exit.code, reason: .exited)
        if let syscall = f.violation {
            // Seen by the supervisor itself, whatever the plugin did to its signals.
            status.reason = .sandboxViolation
            status.syscall = syscall
            status.message = "the sandbox denied the system call \(syscall)"
        } else if let notice = f.notice, !exit.signaled, let code = notice.reason.workerExitCode, code == exit.code {
            // A plugin can write anything to its socket, but cannot fake how its process ended.
            status.reason = notice.reason
            status.message = notice.message
            status.syscall = notice.syscall
        } else if let kill = f.killed {
            status.reason = kill.reason
            status.message = kill.message
        } else if let library = f.libraryChanged, exit.signaled, [LinuxSignal.segv, LinuxSignal.bus, LinuxSignal.ill].contains(exit.code) {
            // Its code was rewritten under it (`cp new.so old.so` truncates the mapped file).
            status.reason = .libraryReplaced
            status.message = "\(library) was written over while the worker ran it; \(replaceAdvice)"
        } else if exit.signaled || exit.code != 0, max(exit.maxRSS, f.lastDataBytes) >= f.hardLimitBytes / 10 * 8 {
            // An allocation failed at the RLIMIT_DATA backstop before the sampler saw the hard limit.
            status.reason = .memoryLimit
            let how = exit.signaled ? LinuxSignal.name(exit.code) : "exit code \(exit.code)"
            if exit.maxRSS >= f.hardLimitBytes / 10 * 8 {
                status.message = "ended (\(how)) at its memory limit: peak resident \(exit.maxRSS >> 20) MiB, limit \(f.hardLimitBytes >> 20) MiB"
            } else {
                // Address space, not resident memory: what a runtime reserves as it loads (Go's arenas,
                // threads' stacks) counts against RLIMIT_DATA, which holds limits.memoryMB.
                status.message = "ended (\(how)) at its memory limit: its address space (\(f.lastDataBytes >> 20) MiB reserved, \(exit.maxRSS >> 20) MiB resident) reached limits.memoryMB \(f.hardLimitBytes >> 20) MiB, which counts what the plugin's runtime reserves as well as what it uses (a Go runtime needs 128)"
            }
        } else if exit.signaled, exit.code == LinuxSignal.sys {
            // The seccomp trap fired where the reporter could not run (SIGSYS blocked or replaced).
            status.reason = .sandboxViolation
            status.message = "killed by SIGSYS: a system call the sandbox forbids"
        } else if !exit.signaled, exit.code == ExitReason.sandboxViolation.workerExitCode {
            // The reporter ran but could not send its notice (another frame was half-written).
            status.reason = .sandboxViolation
            status.message = "ended by the sandbox's violation reporter (the system call's name was not delivered)"
        } else if !exit.signaled, exit.code == ExitReason.disconnected.workerExitCode {
            // Its socket failed or ended before `willTerminate`: no notice could come (a plugin
            // that closed or replaced the worker's descriptor, as daemon-style code does).
            status.reason = .disconnected
            status.message = "the worker's protocol socket failed or was closed before it was asked to stop (did the plugin close or replace its descriptors?)"
        } else if f.stopRequested {
            // Asked to stop, it ended as a stop ends (exit 0, or the SIGKILL after its grace period,
            // which `killed` names): else it crashed or failed on its way out (in `willTerminate`,
            // `destroy`, a call it drained), which `lastExit` says as it is.
            if exit.signaled ? exit.code == 9 || exit.code == 15 : exit.code == 0 {
                status.reason = .stopped
            } else {
                status.message = Self.whileStopping
            }
        } else if !f.ran, !exit.signaled, exit.code == 0 {
            // Its plugin's code ended the process while it started: a failed start, no clean stop.
            status.reason = .startupFailed
            status.message = "the worker ended (exit code 0) before its plugin was running: the library's constructor, sp_plugin_create or the plugin's startup ended the process"
        }
        if status.message == nil || status.message == Self.whileStopping, exit.signaled, exit.code == LinuxSignal.ill || exit.code == LinuxSignal.trap {
            // What a bare SIGILL means is not what a newcomer guesses: the plugin's own code trapped.
            status.message = status.message == nil ? Self.trapAdvice : "\(Self.trapAdvice), \(Self.whileStopping)"
        }
        return status
    }

    /// What a worker ended by SIGILL or SIGTRAP is told.
    package static let trapAdvice = "a trap in the plugin's code (in Swift a failed check: nil force-unwrapped, an index out of range, an overflow, precondition, fatalError); a message the runtime printed is among its stderr lines in the log"

    /// Ended badly: a signal, a non-zero code, killed by the supervisor, or ended before it was
    /// running without being asked to stop (a start that failed, whatever its exit code).
    package static func isAbnormal(_ f: Facts) -> Bool {
        f.exit.signaled || f.exit.code != 0 || f.killed != nil || (!f.ran && !f.stopRequested)
    }

    /// One line for the log: "exit code 1, watchdog, no pong within 3000 ms".
    package static func describe(_ s: ExitStatus) -> String {
        var parts: [String] = []
        if let c = s.code { parts.append("exit code \(c)") }
        if let sig = s.signal { parts.append("signal \(sig)") }
        if s.reason != .exited && s.reason != .signaled { parts.append(s.reason.rawValue) }
        if let sc = s.syscall { parts.append("syscall \(sc)") }
        if let m = s.message { parts.append(m) }
        return parts.joined(separator: ", ")
    }
}
