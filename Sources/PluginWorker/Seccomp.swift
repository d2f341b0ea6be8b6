import CSeccomp
import CWorkerSupport
import LinuxSupport
#if canImport(Glibc)
import Glibc
#endif

/// Compiles `SeccompPolicy` with libseccomp and loads it (with TSYNC, so every thread is covered).
enum Seccomp {
    static let actAllow: UInt32 = 0x7FFF_0000
    static let actTrap: UInt32 = 0x0003_0000
    static func actErrno(_ e: Int32) -> UInt32 { 0x0005_0000 | (UInt32(e) & 0xFFFF) }

    static func action(_ a: SeccompPolicy.Action) -> UInt32 {
        switch a {
        case .allow: return actAllow
        case .trap: return actTrap
        case .errno(let e): return actErrno(e)
        }
    }

    /// A compiled filter, not yet in force. Compiling needs no privilege and changes nothing, so it
    /// happens before the other layers; `load` is the sandbox's last step.
    final class Filter {
        private let ctx: scmp_filter_ctx
        /// Syscall names libseccomp does not know on this architecture (skipped).
        let unknown: [String]

        init(_ rules: [SeccompPolicy.Rule]) throws(WorkerError) {
            guard let ctx = seccomp_init(actErrno(EPERM)) else { throw failure("seccomp_init", ENOMEM) }
            self.ctx = ctx
            // A foreign-architecture or x32 call traps too, so it is reported and ends the worker.
            var rc = seccomp_attr_set(ctx, SCMP_FLTATR_ACT_BADARCH, actTrap)
            guard rc == 0 else { seccomp_release(ctx); throw failure("seccomp_attr_set(ACT_BADARCH)", -rc) }
            rc = seccomp_attr_set(ctx, SCMP_FLTATR_CTL_TSYNC, 1)
            guard rc == 0 else { seccomp_release(ctx); throw failure("seccomp_attr_set(CTL_TSYNC)", -rc) }
            var unknown: [String] = []
            for rule in rules {
                let nr = seccomp_syscall_resolve_name(rule.syscall)
                if nr == __NR_SCMP_ERROR {
                    unknown.append(rule.syscall)
                    continue
                }
                // The reporter names what it catches (names are copied now, before the filter).
                if rule.action == .trap { cws_sigsys_set_name(nr, rule.syscall) }
                var args = rule.conditions.map { c -> scmp_arg_cmp in
                    switch c.op {
                    case .equal: return scmp_arg_cmp(arg: c.arg, op: SCMP_CMP_EQ, datum_a: c.value, datum_b: 0)
                    case .notEqual: return scmp_arg_cmp(arg: c.arg, op: SCMP_CMP_NE, datum_a: c.value, datum_b: 0)
                    case .greater: return scmp_arg_cmp(arg: c.arg, op: SCMP_CMP_GT, datum_a: c.value, datum_b: 0)
                    case .maskedEqual(let mask): return scmp_arg_cmp(arg: c.arg, op: SCMP_CMP_MASKED_EQ, datum_a: mask, datum_b: c.value)
                    }
                }
                rc = args.withUnsafeMutableBufferPointer { buffer in
                    seccomp_rule_add_array(ctx, action(rule.action), nr, UInt32(buffer.count), buffer.baseAddress)
                }
                guard rc == 0 else {
                    seccomp_release(ctx)
                    throw WorkerError(code: .sandboxError, message: "seccomp_rule_add(\(rule.syscall)) failed: \(String(cString: strerror(-rc)))")
                }
            }
            self.unknown = unknown
        }

        /// Installs the SIGSYS reporter (writing to `reportFD` under `sendLock`) and loads the filter.
        func load(reportFD: Int32, sendLock: SendLock) throws(WorkerError) {
            let installed = cws_install_sigsys_reporter(reportFD, sendLock.pointer)
            guard installed == 0 else { throw failure("sigaction(SIGSYS)", -installed) }
            let rc = seccomp_load(ctx)
            guard rc == 0 else { throw failure("seccomp_load", -rc) }
        }

        deinit { seccomp_release(ctx) }
    }

    static func failure(_ call: String, _ code: Int32) -> WorkerError {
        WorkerError(code: .sandboxError, message: "\(call) failed: \(String(cString: strerror(code)))")
    }
}
