import CLinuxSupport
#if canImport(Glibc)
import Glibc
#endif

/// The lifecycle signals (SPEC §7), shared by the supervisor and the worker: blocked in every
/// thread and read on one thread of their own with sigwaitinfo, so no work happens in a handler.
public enum LifecycleSignals {
    public static let all: [Int32] = [SIGTERM, SIGINT, SIGUSR1, SIGTSTP, SIGCONT, SIGHUP]

    /// Blocks them in the calling thread (call before any other thread exists: threads inherit the
    /// mask) and ignores SIGPIPE.
    public static func block() {
        _ = cls_block_lifecycle_signals()
    }

    /// Blocks `sig` too (the supervisor's SIGUSR2, which workers leave alone), in the calling
    /// thread and the threads it makes after.
    public static func blockAlso(_ sig: Int32) {
        _ = cls_block_signal(sig)
    }

    /// Starts a thread that waits for them (and `also`, if not 0) and calls `handler` with each
    /// (on that thread).
    public static func startRelay(also: Int32 = 0, _ handler: @escaping @Sendable (Int32) -> Void) {
        Threads.start(name: "signals") {
            while true {
                let sig = cls_wait_lifecycle_signal_or(also)
                if sig > 0 { handler(sig) }
            }
        }
    }

    /// Catches them (and `also`, if not 0) with a handler that hands each to `startCaughtRelay`'s
    /// thread, whichever thread the kernel gives it to. Blocking them reaches only the threads made
    /// after: a program's own (an embedded host's main thread, its task pool, made before the host)
    /// would take a SIGTERM with the default action and end at once. The handler only writes the
    /// number to a pipe. Counted: each catch is paired with a `releaseCaught`; exec resets the
    /// handler, and the pipe is close-on-exec.
    public static func catchEverywhere(also: Int32 = 0) throws(SystemError) {
        let rc = cls_catch_lifecycle_signals(also)
        if rc < 0 { throw SystemError(call: "sigaction", errno: -rc, context: "the lifecycle signals") }
    }

    /// `startRelay` for signals `catchEverywhere` catches: the thread unblocks them for itself (one
    /// pending while every thread blocked it comes to it), and calls `handler` with each.
    public static func startCaughtRelay(also: Int32 = 0, _ handler: @escaping @Sendable (Int32) -> Void) {
        Threads.start(name: "signals") {
            while true {
                let sig = cls_wait_caught_signal(also)
                guard sig > 0 else { return }
                handler(sig)
            }
        }
    }

    /// Has the relay `startCaughtRelay` started block them for itself too, after passing on what
    /// was caught before: from then on they stay pending for the process, across an exec as well
    /// (an upgrade's next binary takes them once its relay starts), until `resumeCaughtRelay`.
    /// Whether it was asked to (false: no such relay runs): then `resumeCaughtRelay` must follow,
    /// if the process goes on. One that did not answer within `timeoutMs` pauses when it reads the
    /// request.
    public static func pauseCaughtRelay(timeoutMs: Int32 = 200) -> Bool {
        cls_pause_caught_relay(timeoutMs) >= 0
    }

    /// The relay `pauseCaughtRelay` paused takes them again, those pending first.
    public static func resumeCaughtRelay() {
        cls_resume_caught_relay()
    }

    /// Ends the relay `startCaughtRelay` started and, at the last release of as many as there were
    /// catches, gives them (and `also`) back what the program had for them: an embedded host that
    /// has stopped leaves the signals to its program. Not for `supervisor start`, whose last
    /// moments must not die of a SIGTERM.
    public static func releaseCaught(also: Int32 = 0) {
        cls_release_caught_signals(also)
    }

    /// "SIGTERM" for 15; "signal N" for one without a name.
    public static func name(_ sig: Int32) -> String {
        cls_signal_name(sig).map { String(cString: $0) } ?? "signal \(sig)"
    }

    /// The number of a signal named as `name` spells it ("SIGSEGV"), or nil.
    public static func number(_ name: String) -> Int32? {
        (1..<65).first { cls_signal_name($0).map { String(cString: $0) } == name }
    }
}

/// Detached threads for the few long-lived loops (signals, the child watcher) that must not run on
/// a Dispatch or NIO thread.
public enum Threads {
    public static func start(name: String, _ run: @escaping @Sendable () -> Void) {
        precondition(tryStart(name: name, run), "pthread_create for the \(name) thread failed")
    }

    /// `start`, or false (nothing started) when no thread can be made now (a tasks limit).
    public static func tryStart(name: String, _ run: @escaping @Sendable () -> Void) -> Bool {
        let body: @Sendable () -> Void = {
            cls_set_thread_name(name)
            // Our threads take no lifecycle signal (a relay unblocks them for itself): in an
            // embedded host's program, where they are caught, not blocked, they go to the
            // program's threads or the relay, never into a blocking call of ours.
            _ = cls_mask_lifecycle_signals()
            run()
        }
        final class Box: Sendable {  // handed to exactly one new thread, read once there
            let body: @Sendable () -> Void
            init(_ body: @escaping @Sendable () -> Void) { self.body = body }
        }
        let box = Unmanaged.passRetained(Box(body)).toOpaque()
        var thread = pthread_t()
        let rc = pthread_create(&thread, nil, { arg in
            Unmanaged<Box>.fromOpaque(arg!).takeRetainedValue().body()
            return nil
        }, box)
        guard rc == 0 else {
            Unmanaged<Box>.fromOpaque(box).release()
            return false
        }
        pthread_detach(thread)
        return true
    }
}
