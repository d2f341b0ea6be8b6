import CSupervisorSupport
import Synchronization
#if canImport(Glibc)
import Glibc
#endif

/// How a child process ended.
public struct ChildExit: Sendable, Equatable {
    public var pid: pid_t
    /// Exit status, or the signal number when `signaled`.
    public var code: Int32
    public var signaled: Bool
    /// Peak resident size in bytes (from wait4's rusage).
    public var maxRSS: Int = 0

    public var signalName: String {
        css_signal_name(code).map { String(cString: $0) } ?? "SIG\(code)"
    }
}

/// Observes every child's exit the moment it happens: a thread blocked in wait4(-1)
/// (no polling), which sleeps on a condition while there are no children.
final class ChildReaper: Sendable {
    /// How many spawns there have been. After an ECHILD the reaper sleeps until this moves on
    /// (a counter of spawns, not of live children: wait4(-1) also reaps children we did not spawn).
    private let spawns = Mutex<UInt64>(0)
    private let wake = Condition()
    private let onExit: @Sendable (ChildExit) -> Void

    init(onExit: @escaping @Sendable (ChildExit) -> Void) {
        self.onExit = onExit
        let box = Unmanaged.passRetained(self).toOpaque()
        var thread = pthread_t()
        let rc = pthread_create(&thread, nil, { arg in
            let reaper = Unmanaged<ChildReaper>.fromOpaque(arg!).takeRetainedValue()
            reaper.run()
        }, box)
        precondition(rc == 0, "pthread_create for the child reaper failed: \(rc)")
        pthread_detach(thread)
    }

    /// Call after each successful spawn.
    func childSpawned() {
        spawns.withLock { $0 &+= 1 }
        wake.signal()
    }

    private func run() -> Never {
        var seen: UInt64 = 0
        while true {
            wake.wait { spawns.withLock { $0 } != seen }
            let before = spawns.withLock { $0 }
            var pid: pid_t = 0, code: Int32 = 0, signaled: Int32 = 0, maxRSSKB = 0
            let rc = css_wait_any_child(&pid, &code, &signaled, &maxRSSKB)
            if rc == -ECHILD {
                seen = before  // sleep until a spawn after this wait
                continue
            }
            guard rc == 0 else { continue }
            onExit(ChildExit(pid: pid, code: code, signaled: signaled != 0, maxRSS: maxRSSKB * 1024))
        }
    }
}

/// A pthread condition variable with its mutex.
final class Condition: @unchecked Sendable {
    private var mutex = pthread_mutex_t()
    private var cond = pthread_cond_t()

    init() {
        pthread_mutex_init(&mutex, nil)
        pthread_cond_init(&cond, nil)
    }

    func signal() {
        pthread_mutex_lock(&mutex)
        pthread_cond_broadcast(&cond)
        pthread_mutex_unlock(&mutex)
    }

    /// Waits until `ready()` is true (checked under the condition's mutex, at most every 250 ms).
    func wait(until ready: () -> Bool) {
        pthread_mutex_lock(&mutex)
        while !ready() {
            var ts = timespec()
            clock_gettime(CLOCK_REALTIME, &ts)
            ts.tv_nsec += 250_000_000
            if ts.tv_nsec >= 1_000_000_000 { ts.tv_sec += 1; ts.tv_nsec -= 1_000_000_000 }
            pthread_cond_timedwait(&cond, &mutex, &ts)
        }
        pthread_mutex_unlock(&mutex)
    }
}
