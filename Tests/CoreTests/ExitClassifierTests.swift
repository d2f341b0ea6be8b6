import Testing
import SupervisorCore

/// The cause of a worker's end, named from what is known of it (Workers/ExitClassifier.swift). Signal
/// numbers are Linux's (SIGKILL 9, SIGBUS 7, SIGSEGV 11, SIGSYS 31).
@Suite struct ExitClassifierTests {
    func facts(code: Int32 = 0, signal: Int32? = nil, notice: ExitNotice? = nil, killed: (ExitReason, String)? = nil,
               stop: Bool = false, rss: Int = 0, data: Int = 0, hard: Int = 1 << 30) -> ExitClassifier.Facts {
        let exit = WorkerExit(pid: 42, code: signal ?? code, signaled: signal != nil, maxRSS: rss)
        return ExitClassifier.Facts(exit: exit, notice: notice, killed: killed.map { (reason: $0.0, message: $0.1) },
                                    stopRequested: stop, lastDataBytes: data, hardLimitBytes: hard)
    }

    @Test func exitCodeAndSignal() {
        let coded = ExitClassifier.classify(facts(code: 3))
        #expect(coded.code == 3 && coded.signal == nil && coded.reason == .exited)
        #expect(ExitClassifier.isAbnormal(facts(code: 3)))
        #expect(!ExitClassifier.isAbnormal(facts(code: 0)))
        let signaled = ExitClassifier.classify(facts(signal: 11))
        #expect(signaled.signal == "SIGSEGV" && signaled.code == nil && signaled.reason == .signaled)
        #expect(ExitClassifier.describe(signaled) == "signal SIGSEGV")
    }

    /// SIGILL and SIGTRAP: the plugin's code trapped (Swift's failed checks), said in words.
    @Test func aTrapSaysWhatItMeans() {
        for signal: Int32 in [4, 5] {
            let status = ExitClassifier.classify(facts(signal: signal))
            #expect(status.reason == .signaled && status.message == ExitClassifier.trapAdvice)
            #expect(ExitClassifier.describe(status).contains("a trap in the plugin's code (in Swift a failed check"))
        }
        #expect(ExitClassifier.classify(facts(signal: 6)).message == nil)
        // Asked to stop, a trap is still a trap (as a SIGSEGV then is a crash), said as it is.
        let stopping = ExitClassifier.classify(facts(signal: 4, stop: true))
        #expect(stopping.reason == .signaled && stopping.message == "\(ExitClassifier.trapAdvice), while it was being stopped")
        let crashed = ExitClassifier.classify(facts(signal: 11, stop: true))
        #expect(crashed.reason == .signaled && crashed.signal == "SIGSEGV" && crashed.message == "while it was being stopped")
        #expect(ExitClassifier.describe(crashed) == "signal SIGSEGV, while it was being stopped")
        let failed = ExitClassifier.classify(facts(code: 3, stop: true))
        #expect(failed.reason == .exited && failed.code == 3 && failed.message == "while it was being stopped")
        // Its grace period's SIGKILL, a SIGTERM, exit 0: a stop.
        for stop in [facts(signal: 9, stop: true), facts(signal: 15, stop: true), facts(code: 0, stop: true)] {
            #expect(ExitClassifier.classify(stop).reason == .stopped)
        }
    }

    @Test func aCleanExitBeforeItRanIsAFailedStartNotAStop() {
        var early = facts(code: 0)
        early.ran = false
        #expect(ExitClassifier.isAbnormal(early))
        #expect(ExitClassifier.classify(early).reason == .startupFailed && ExitClassifier.classify(early).message?.contains("before its plugin was running") == true)
        // Asked to stop before it ran: a stop.
        var stopped = facts(code: 0, stop: true)
        stopped.ran = false
        #expect(!ExitClassifier.isAbnormal(stopped) && ExitClassifier.classify(stopped).reason == .stopped)
    }

    @Test func aSocketLostBeforeWillTerminateIsDisconnected() {
        let lost = ExitClassifier.classify(facts(code: 74))
        #expect(lost.reason == .disconnected && lost.code == 74 && ExitClassifier.isAbnormal(facts(code: 74)))
        #expect(lost.message?.contains("protocol socket") == true)
        // Asked to stop, it ended cleanly: whatever came after `willTerminate` on its socket.
        #expect(ExitClassifier.classify(facts(code: 0, stop: true)).reason == .stopped)
        #expect(ExitClassifier.classify(facts(signal: 9, killed: (.disconnected, "closed its socket but did not exit"))).reason == .disconnected)
    }

    @Test func sandboxViolationWithSyscallOnlyWithItsExitCode() {
        let notice = ExitNotice(reason: .sandboxViolation, message: "the sandbox denied the system call ptrace", syscall: "ptrace")
        let believed = ExitClassifier.classify(facts(code: 159, notice: notice))
        #expect(believed.reason == .sandboxViolation && believed.syscall == "ptrace")
        #expect(ExitClassifier.describe(believed) == "exit code 159, sandboxViolation, syscall ptrace, the sandbox denied the system call ptrace")
        // A plugin writing the same notice and exiting 0 is not believed.
        let forged = ExitClassifier.classify(facts(code: 0, notice: notice))
        #expect(forged.reason == .exited && forged.syscall == nil)
        // 31 with no report (the handler could not run): still a violation, without the name.
        #expect(ExitClassifier.classify(facts(signal: 31)).reason == .sandboxViolation)
        // The reporter's exit code without its notice (the notice could not be sent).
        #expect(ExitClassifier.classify(facts(code: 159)).reason == .sandboxViolation)
    }

    @Test func violationSeenByTheSupervisorWinsWhateverTheExit() {
        // The notifier killed it for a fatal call: named, whatever the worker wrote or how it died.
        var f = facts(signal: 9)
        f.violation = "execve"
        let status = ExitClassifier.classify(f)
        #expect(status.reason == .sandboxViolation && status.syscall == "execve" && status.signal == "SIGKILL")
        var forged = facts(code: 78, notice: ExitNotice(reason: .loadError, message: "x"))
        forged.violation = "clone"
        #expect(ExitClassifier.classify(forged).syscall == "clone")
    }

    @Test func aCrashAfterTheLibraryChangedIsLibraryReplaced() {
        for signal: Int32 in [11, 7, 4] {
            var f = facts(signal: signal)
            f.libraryChanged = "/b/libx.so"
            let status = ExitClassifier.classify(f)
            #expect(status.reason == .libraryReplaced && status.message?.hasPrefix("/b/libx.so was written over") == true)
        }
        // Another way to end, or the library untouched: not its doing.
        var aborted = facts(signal: 6)
        aborted.libraryChanged = "/b/libx.so"
        #expect(ExitClassifier.classify(aborted).reason == .signaled)
        #expect(ExitClassifier.classify(facts(signal: 11)).reason == .signaled)
    }

    @Test func killsByTheSupervisor() {
        for reason in [ExitReason.watchdog, .protocolViolation, .startupTimeout, .memoryLimit, .dependencyRestarted] {
            let status = ExitClassifier.classify(facts(signal: 9, killed: (reason, "why")))
            #expect(status.reason == reason && status.message == "why" && status.signal == "SIGKILL")
            #expect(ExitClassifier.isAbnormal(facts(code: 0, killed: (reason, "why"))))
        }
    }

    @Test func memoryLimitFromPeakSizeWhenTheSamplerMissedIt() {
        let hard = 64 << 20
        #expect(ExitClassifier.classify(facts(signal: 11, rss: 60 << 20, hard: hard)).reason == .memoryLimit)
        #expect(ExitClassifier.classify(facts(code: 1, data: 55 << 20, hard: hard)).reason == .memoryLimit)
        // Address space, not resident memory, said as such (a Go runtime's arenas at load).
        let reserved = ExitClassifier.classify(facts(signal: 6, rss: 10 << 20, data: 60 << 20, hard: hard))
        #expect(reserved.message?.contains("its address space (60 MiB reserved, 10 MiB resident) reached limits.memoryMB 64 MiB") == true, "\(reserved)")
        #expect(ExitClassifier.classify(facts(signal: 11, rss: 60 << 20, hard: hard)).message?.contains("peak resident 60 MiB, limit 64 MiB") == true)
        #expect(ExitClassifier.classify(facts(signal: 11, rss: 10 << 20, hard: hard)).reason == .signaled)
        // A clean exit near the limit is just a clean exit.
        #expect(ExitClassifier.classify(facts(code: 0, rss: 60 << 20, hard: hard)).reason == .exited)
    }

    @Test func loadErrorsAndStops() {
        let load = ExitNotice(reason: .missingSymbol, message: "no sp_plugin_create")
        #expect(ExitClassifier.classify(facts(code: 78, notice: load)).reason == .missingSymbol)
        #expect(ExitReason.missingSymbol.isPermanent && !ExitReason.watchdog.isPermanent)
        #expect(ExitClassifier.classify(facts(code: 0, stop: true)).reason == .stopped)
        #expect(ExitClassifier.classify(facts(signal: 9, killed: (.stopped, "grace period over"), stop: true)).reason == .stopped)
    }
}

@Suite struct DenialKeysTests {
    @Test func thousandsOfMadeUpSyscallsCountUnderSixtyFiveNames() {
        var counted: [String: Int] = [:]
        for nr in 100_000..<105_000 { counted[DenialKeys.key("syscall:\(nr)", counted: counted), default: 0] += 1 }
        #expect(counted.count == DenialKeys.limit + 1)
        #expect(counted[DenialKeys.other] == 5_000 - DenialKeys.limit)
        // A name already counted keeps its own count.
        #expect(DenialKeys.key("syscall:100000", counted: counted) == "syscall:100000")
        #expect(DenialKeys.key("ptrace", counted: counted) == DenialKeys.other)
    }
}
