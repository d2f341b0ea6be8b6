import CLinuxSupport
import Dispatch
import PluginProtocol
#if canImport(Glibc)
import Glibc
#endif

/// The one thread that makes the supervisor's children and execs a new binary in an upgrade: the
/// main thread, which lives as long as the process. `PR_SET_PDEATHSIG` fires when the *thread*
/// that made a child ends, and `execve` ends every thread but the one that calls it, so a process
/// that execs itself in place keeps its children only if that thread made every one of them; and
/// after the exec that thread is the new binary's main thread, which makes the children of the
/// next generation (docs/operations.md, "Upgrading the supervisor").
///
/// The main thread serves it (`serve(until:)`) while the supervisor runs; the event loop asks with
/// `sync`, which waits (a spawn is a few hundred microseconds of the main thread's time).
public final class SpawnerThread: Sendable {
    private let jobs = Guarded<[@Sendable () -> Void]>([])
    private let wake = DispatchSemaphore(value: 0)
    private let thread: pid_t

    /// Made on the thread that will serve it (the main thread).
    public init() {
        thread = pid_t(cls_thread_id())
    }

    /// Whether the caller is the spawner thread itself.
    public var isCurrent: Bool { pid_t(cls_thread_id()) == thread }

    /// Runs `body` on the spawner thread and waits for it. `body` does not escape: the caller waits
    /// until it has run, so it may write the caller's variables.
    public func sync(_ body: () -> Void) {
        if isCurrent { return body() }
        withoutActuallyEscaping(body) { escaping in
            // Run once, on the spawner thread, while its caller waits below; let go of before the
            // caller goes on (the posted closure itself may outlive this call in the spawner's batch).
            nonisolated(unsafe) var job: (() -> Void)? = escaping
            let done = DispatchSemaphore(value: 0)
            post {
                job?()
                job = nil
                done.signal()
            }
            done.wait()
        }
    }

    private func post(_ job: @escaping @Sendable () -> Void) {
        jobs.withLock { $0.append(job) }
        wake.signal()
    }

    /// Serves jobs on the calling thread (the one that made this) until `isDone` says so after a
    /// wake-up; `finish()` wakes it for that.
    public func serve(until isDone: () -> Bool) {
        precondition(isCurrent, "the spawner thread serves only on the thread that made it")
        while !isDone() {
            wake.wait()
            let batch = jobs.withLock { j in defer { j = [] }; return j }
            for job in batch { job() }
        }
    }

    /// Wakes `serve` to look at its condition again.
    public func finish() { wake.signal() }
}
