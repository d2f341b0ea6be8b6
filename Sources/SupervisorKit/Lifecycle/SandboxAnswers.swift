#if canImport(Glibc)
import Glibc
#endif
import CSeccomp
import LinuxSupport
import Logging
import NIOCore
import PluginProtocol
import SupervisorCore

/// The supervisor's answers to the calls a worker's seccomp filter hands over (SPEC §5): a call the
/// policy calls fatal ends the worker, named, even when the plugin blocked every signal first (libc's
/// `system()` and `posix_spawn` do); any other is refused with EPERM and counted. Runs on the
/// notifier's thread: it decides from the call alone and hands the record to the event loop.
enum SandboxAnswers {
    static let auditArchX86_64: UInt32 = 0xC000_003E
    static let auditArchAArch64: UInt32 = 0xC000_00B7
    static let x32Bit: Int32 = 0x4000_0000

    static func answer(_ call: SeccompCall, for worker: Handed<(lifecycle: Lifecycle, instance: WorkerInstance)>) -> SeccompAnswer {
        let (name, foreign) = self.name(call)
        let fatal = foreign || SeccompPolicy.isFatal(name, args: call.args)
        // Queued before the kill below, so the loop records the violation before it sees the exit.
        let args = call.args.prefix(3).map { "0x" + String($0, radix: 16) }.joined(separator: ", ")
        worker.execute { $0.lifecycle.sandboxRefused($0.instance, syscall: name, arguments: args, fatal: fatal) }
        return fatal ? .kill : .fail(errno: EPERM)
    }

    /// The call's name as the filter's policy spells it; `foreign` for another architecture's call
    /// or an x32 one (always fatal: the policy is written for this architecture only).
    static func name(_ call: SeccompCall) -> (name: String, foreign: Bool) {
        if call.arch != auditArchX86_64 && call.arch != auditArchAArch64 { return ("foreign-arch:\(call.nr)", true) }
        if call.nr & x32Bit != 0 { return ("x32:\(call.nr & ~x32Bit)", true) }
        guard let raw = seccomp_syscall_resolve_num_arch(call.arch, call.nr) else { return ("syscall:\(call.nr)", false) }
        defer { free(raw) }
        return (String(cString: raw), false)
    }
}

extension Lifecycle {
    /// A worker's filter refused `syscall`: counted for its plugin; a violation is kept for the exit
    /// record (the notifier has killed the worker already).
    /// `arguments`: the first three, for the log (what a library tried, e.g. which socket family).
    func sandboxRefused(_ instance: WorkerInstance, syscall: String, arguments: String, fatal: Bool) {
        loop.preconditionInEventLoop()
        if let record = table[instance.identifier], record.role(of: instance) != nil {
            let key = DenialKeys.key(syscall, counted: record.sandboxDenials)
            record.sandboxDenials[key, default: 0] += 1
            shared.metrics.denied(record.identifier, syscall: key)
        }
        let meta: Logger.Metadata = ["plugin": "\(instance.identifier)", "pid": "\(instance.pid)", "syscall": "\(syscall)"]
        if fatal {
            if instance.violation == nil { instance.violation = syscall }
            logger.warning("sandbox violation: \(instance.identifier) called \(syscall)(\(arguments)); the worker is killed", metadata: meta)
        } else {
            let hint = syscall == "socket" ? "; the manifest's `network` permission allows AF_UNIX, AF_INET and AF_INET6 sockets" : ""
            logger.debug("sandbox denied \(syscall)(\(arguments)) to \(instance.identifier): EPERM\(hint)", metadata: meta)
        }
    }
}
