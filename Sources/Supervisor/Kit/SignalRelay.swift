import CSupervisorSupport
#if canImport(Glibc)
import Glibc
#endif

/// The supervisor's signals (SPEC §7): blocked in every thread and read on one thread of their own
/// with sigwaitinfo, so no work happens in a signal handler. Workers get an empty mask at spawn.
enum SignalRelay {
    static let handled: [Int32] = [SIGTERM, SIGINT, SIGUSR1, SIGTSTP, SIGCONT, SIGHUP]

    static func signalSet() -> sigset_t {
        var set = sigset_t()
        sigemptyset(&set)
        for s in handled { sigaddset(&set, s) }
        return set
    }

    /// Call before any thread is created.
    static func blockLifecycleSignals() {
        var set = signalSet()
        pthread_sigmask(SIG_BLOCK, &set, nil)
        signal(SIGPIPE, SIG_IGN)
    }

    static func start(_ handler: @escaping @Sendable (Int32) -> Void) {
        final class Box: @unchecked Sendable { let handler: @Sendable (Int32) -> Void; init(_ h: @escaping @Sendable (Int32) -> Void) { handler = h } }
        let box = Unmanaged.passRetained(Box(handler)).toOpaque()
        var thread = pthread_t()
        let rc = pthread_create(&thread, nil, { arg in
            let box = Unmanaged<Box>.fromOpaque(arg!).takeRetainedValue()
            var set = SignalRelay.signalSet()
            while true {
                let sig = sigwaitinfo(&set, nil)
                if sig > 0 { box.handler(sig) }
            }
        }, box)
        precondition(rc == 0, "pthread_create for the signal relay failed: \(rc)")
        pthread_detach(thread)
    }

    static func name(_ sig: Int32) -> String {
        css_signal_name(sig).map { String(cString: $0) } ?? "signal \(sig)"
    }
}
