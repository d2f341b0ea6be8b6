import CSeccomp
import CSandboxSupport
import LinuxSupport
import PluginProtocol
#if canImport(Glibc)
import Glibc
#endif

/// Compiles a seccomp policy (`SeccompPolicy`'s rules, or the installer's) with libseccomp and loads
/// it (with TSYNC, so every thread is covered).
public enum Seccomp {
    static let actAllow: UInt32 = 0x7FFF_0000
    static let actTrap: UInt32 = 0x0003_0000
    static let actNotify: UInt32 = 0x7FC0_0000
    static func actErrno(_ e: Int32) -> UInt32 { 0x0005_0000 | (UInt32(e) & 0xFFFF) }

    /// With `notify`, what is not allowed goes to the supervisor: a fatal call, and a plain
    /// denial (EPERM), which it counts. An errno the policy gives on purpose (clone3's ENOSYS, so
    /// libc falls back to clone) is no denial and stays in the filter.
    static func action(_ a: SeccompPolicy.Action, notify: Bool) -> UInt32 {
        switch a {
        case .allow: return actAllow
        case .trap: return notify ? actNotify : actTrap
        case .errno(let e): return actErrno(e)
        }
    }

    /// A compiled filter, not yet in force. Compiling needs no privilege and changes nothing, so it
    /// happens before the other layers; `load` is the sandbox's last step.
    public final class Filter {
        /// libseccomp's filter, or a BPF program compiled elsewhere (the supervisor compiles each
        /// distinct policy once and hands the program to its workers).
        private enum Source {
            case rules(scmp_filter_ctx)
            case program([UInt8])
        }

        private let source: Source
        /// Syscall names libseccomp does not know on this architecture (skipped).
        public let unknown: [String]

        /// Whether what the filter does not allow goes to the supervisor (user notification).
        public let notify: Bool

        /// `notify`: what is not allowed goes to a listener (see `load`); otherwise it fails with
        /// EPERM and fatal rules trap. `allowByDefault`: a denylist instead (the installer's): what
        /// no rule names is allowed.
        public init(_ rules: [SeccompPolicy.Rule], notify: Bool, allowByDefault: Bool = false) throws(ConfinementError) {
            let defaultAction = allowByDefault ? actAllow : notify ? actNotify : actErrno(EPERM)
            guard let ctx = seccomp_init(defaultAction) else { throw failure("seccomp_init", ENOMEM) }
            self.source = .rules(ctx)
            self.notify = notify
            // A foreign-architecture or x32 call is fatal too, so it is reported and ends the worker.
            var rc = seccomp_attr_set(ctx, SCMP_FLTATR_ACT_BADARCH, notify ? actNotify : actTrap)
            guard rc == 0 else { seccomp_release(ctx); throw failure("seccomp_attr_set(ACT_BADARCH)", -rc) }
            rc = seccomp_attr_set(ctx, SCMP_FLTATR_CTL_TSYNC, 1)
            guard rc == 0 else { seccomp_release(ctx); throw failure("seccomp_attr_set(CTL_TSYNC)", -rc) }
            // Syscall numbers in a binary tree instead of one long list (libseccomp 2.5): at load the
            // kernel runs the filter once for every syscall number (to cache those always allowed),
            // and at run time every call outside that cache walks it; both take a few comparisons
            // instead of up to one per rule. An older libseccomp refuses the attribute: a list then.
            _ = seccomp_attr_set(ctx, SCMP_FLTATR_CTL_OPTIMIZE, 2)
            var unknown: [String] = []
            for rule in rules {
                let nr = seccomp_syscall_resolve_name(rule.syscall)
                if nr == __NR_SCMP_ERROR {
                    unknown.append(rule.syscall)
                    continue
                }
                // The reporter names what it catches (names are copied now, before the filter).
                if rule.action == .trap { cws_sigsys_set_name(nr, rule.syscall) }
                // libseccomp refuses a rule that repeats the default action: with `notify`, the
                // fatal rules are the default (the supervisor tells them apart by the policy).
                if action(rule.action, notify: notify) == defaultAction { continue }
                var args = rule.conditions.map { c -> scmp_arg_cmp in
                    switch c.op {
                    case .equal: return scmp_arg_cmp(arg: c.arg, op: SCMP_CMP_EQ, datum_a: c.value, datum_b: 0)
                    case .notEqual: return scmp_arg_cmp(arg: c.arg, op: SCMP_CMP_NE, datum_a: c.value, datum_b: 0)
                    case .greater: return scmp_arg_cmp(arg: c.arg, op: SCMP_CMP_GT, datum_a: c.value, datum_b: 0)
                    case .maskedEqual(let mask): return scmp_arg_cmp(arg: c.arg, op: SCMP_CMP_MASKED_EQ, datum_a: mask, datum_b: c.value)
                    }
                }
                rc = args.withUnsafeMutableBufferPointer { buffer in
                    seccomp_rule_add_array(ctx, action(rule.action, notify: notify), nr, UInt32(buffer.count), buffer.baseAddress)
                }
                guard rc == 0 else {
                    seccomp_release(ctx)
                    throw ConfinementError(call: "seccomp_rule_add(\(rule.syscall))", errno: -rc)
                }
            }
            self.unknown = unknown
        }

        /// A program `Filter.program` made, for a filter with a listener (`notify`: with trap rules the
        /// SIGSYS reporter would need the names the compiling process noted).
        public init(program: [UInt8]) throws(ConfinementError) {
            guard !program.isEmpty, program.count % 8 == 0, program.count / 8 <= 4096 else {
                throw failure("a precompiled seccomp program of \(program.count) bytes", EINVAL)
            }
            source = .program(program)
            unknown = []
            notify = true
        }

        /// Compiles `rules` with a listener and returns the BPF program, for `init(program:)` in
        /// another process. Changes nothing in this one.
        public static func program(_ rules: [SeccompPolicy.Rule]) throws(ConfinementError) -> [UInt8] {
            try Filter(rules, notify: true).exportBPF()
        }

        /// Installs the SIGSYS reporter (writing to `reportFD` under `sendLock`) and loads the filter.
        /// With `notify`, returns the filter's listener, which must reach the supervisor before
        /// anything else runs (a call it does not allow waits for the supervisor's answer).
        public func load(reportFD: Int32, sendLock: SendLock) throws(ConfinementError) -> OwnedDescriptor? {
            let installed = cws_install_sigsys_reporter(reportFD, sendLock.pointer)
            guard installed == 0 else { throw failure("sigaction(SIGSYS)", -installed) }
            return try load()
        }

        /// Loads the filter (without a SIGSYS reporter: a trap then simply ends the process).
        public func load() throws(ConfinementError) -> OwnedDescriptor? {
            guard notify else {
                guard case .rules(let ctx) = source else { throw failure("seccomp_load", EINVAL) }
                let rc = seccomp_load(ctx)
                guard rc == 0 else { throw failure("seccomp_load", -rc) }
                return nil
            }
            // libseccomp 2.5 loads a filter with TSYNC but then without a listener: take its BPF
            // program and load it here with both (and TSYNC_ESRCH, which makes that legal).
            let program = try exportBPF()
            let fd = program.withUnsafeBytes { cws_seccomp_install($0.baseAddress, UInt32($0.count / 8), 1) }
            guard fd > 0 else { throw failure("seccomp(SECCOMP_SET_MODE_FILTER, NEW_LISTENER)", fd < 0 ? -fd : EBADF) }
            return OwnedDescriptor(fd)
        }

        /// The compiled BPF program (seccomp_export_bpf writes it to a descriptor: a pipe, whose
        /// 64 KiB hold the largest program the kernel accepts, 4096 instructions of 8 bytes).
        private func exportBPF() throws(ConfinementError) -> [UInt8] {
            let ctx: scmp_filter_ctx
            switch source {
            case .program(let program): return program
            case .rules(let c): ctx = c
            }
            var fds: [Int32] = [-1, -1]
            guard cls_pipe_cloexec(&fds) == 0 else { throw failure("pipe2", errno) }
            let reader = OwnedDescriptor(fds[0])
            do {
                let writer = OwnedDescriptor(fds[1])
                let rc = seccomp_export_bpf(ctx, writer.raw)
                guard rc == 0 else { throw failure("seccomp_export_bpf", -rc) }
            }
            var program: [UInt8] = []
            var chunk = [UInt8](repeating: 0, count: 8192)
            while true {
                let n = chunk.withUnsafeMutableBytes { Glibc.read(reader.raw, $0.baseAddress, $0.count) }
                if n < 0 && errno == EINTR { continue }
                guard n >= 0 else { throw failure("read(BPF)", errno) }
                if n == 0 { break }
                program += chunk[0..<n]
            }
            guard !program.isEmpty, program.count % 8 == 0 else { throw failure("seccomp_export_bpf", EINVAL) }
            return program
        }

        deinit { if case .rules(let ctx) = source { seccomp_release(ctx) } }
    }

    static func failure(_ call: String, _ code: Int32) -> ConfinementError {
        ConfinementError(call: call, errno: code)
    }
}
