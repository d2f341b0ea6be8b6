import LinuxSupport
import Dispatch
import PluginProtocol
#if canImport(Glibc)
import Glibc
#endif

/// Turns signals sent to this worker's own pid into lifecycle events for its plugin alone (SPEC §7):
/// TERM/INT → willTerminate then a clean exit, USR1 → memoryWarning, TSTP → background,
/// CONT → foreground, HUP ignored. Runs on a thread of its own that waits with sigwaitinfo; the
/// signals are blocked everywhere else, so no work happens in a signal handler.
enum SignalRelay {
    /// How long a plugin has to answer `willTerminate` when its own pid is signalled.
    static let terminationGrace: Int64 = 5_000_000

    static func start(host: WorkerHost) {
        LifecycleSignals.startRelay { sig in handle(sig, host) }
    }

    static func handle(_ sig: Int32, _ host: WorkerHost) {
        if sig == SIGTERM || sig == SIGINT { terminate(host, signal: sig) }
        // No plugin yet (a standby at its gate, one still loading): nobody to tell, and an event left
        // unanswered would keep every later send looking for its reply.
        guard host.hasPlugin else { return }
        switch sig {
        case SIGUSR1: host.deliverLocalEvent(.memoryWarning) {}
        case SIGTSTP: host.deliverLocalEvent(.background) {}
        case SIGCONT: host.deliverLocalEvent(.foreground) {}
        default: break  // SIGHUP: ignored by workers.
        }
    }

    /// willTerminate, wait for the reply up to the grace period, destroy the plugin, exit 0 (at once
    /// when no plugin is there), saying why in an `exit` notice.
    static func terminate(_ host: WorkerHost, signal: Int32) -> Never {
        let name = signal == SIGINT ? "SIGINT" : "SIGTERM"
        func exiting(_ message: String) {
            if let frame = try? ProtocolJSON.frame(ExitNotice(reason: .terminated, message: message)) { try? host.connection.sendFrame(frame) }
        }
        guard host.hasPlugin else {
            // A standby at its gate, or a worker whose plugin is still loading: there is no one to
            // hear willTerminate, so it ends now instead of after the grace period (`_exit`: the
            // main thread may be inside the plugin's constructors).
            exiting("\(name) to the worker before its plugin was loaded; exiting")
            _exit(0)
        }
        let answered = DispatchSemaphore(value: 0)
        host.deliverLocalEvent(.willTerminate) { answered.signal() }
        let late = answered.wait(timeout: .now() + .microseconds(Int(terminationGrace))) == .timedOut
        host.destroy()
        exiting("\(name) to the worker: willTerminate " + (late ? "unanswered within the grace period" : "answered") + "; exiting cleanly")
        exit(0)
    }
}
