import CWorkerSupport
import PluginProtocol
#if canImport(Glibc)
import Glibc
#endif

/// The process-level confinement every worker applies before anything else: die with the supervisor,
/// check the supervisor is still the parent, drop inherited descriptors, no new privileges.
/// The syscall filter and file-system rules build on this (docs/sandbox.md).
enum Confinement {
    struct Applied {
        var layers: [String] = ["process", "session"]
        var missing: [String] = []
    }

    static func applyBase(_ spec: WorkerSpec) throws(WorkerError) -> Applied {
        var applied = Applied()
        let rc = cws_set_parent_death_signal(SIGKILL)
        guard rc == 0 else { throw sandboxError("prctl(PR_SET_PDEATHSIG)", -rc) }
        // The parent may have died between our spawn and the prctl: then we are already orphaned.
        guard getppid() == spec.supervisorPID else {
            throw WorkerError(code: .orphaned, message: "the supervisor (pid \(spec.supervisorPID)) is gone; exiting")
        }
        applied.layers.append("pdeathsig")
        let closed = cws_close_descriptors_from(3, spec.socketFD)
        guard closed == 0 else { throw sandboxError("close_range", -closed) }
        applied.layers.append("closedDescriptors")
        let nnp = cws_set_no_new_privs()
        guard nnp == 0 else { throw sandboxError("prctl(PR_SET_NO_NEW_PRIVS)", -nnp) }
        applied.layers.append("noNewPrivs")
        return applied
    }

    static func sandboxError(_ call: String, _ code: Int32) -> WorkerError {
        WorkerError(code: .sandboxError, message: "\(call) failed: \(String(cString: strerror(code)))")
    }
}
