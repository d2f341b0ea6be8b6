import Logging
import NIOCore
import PluginProtocol
import SupervisorCore

extension Router {
    /// One frame from a worker: read once (`WorkerMessage`, the routing fields only), then handed to
    /// whoever owns what it is about. Anything a worker may not say is a protocol violation that
    /// ends that worker. What is the lifecycle's (a hello, a violation, an exit notice) is posted to
    /// it; a call to the program's own methods (`@host`) is handed back to the engine.
    func workerFrame(_ instance: WorkerInstance, _ frame: ByteBuffer) -> HostCall? {
        // A worker that broke the protocol is being killed: nothing it sent after that counts
        // (FrameGate); nor does what a worker killed for another reason (its watchdog) says.
        guard instance.gate.isOpen, instance.killReason == nil || instance.phase.stopRequested else { return nil }
        return frame.withUnsafeReadableBytes { bytes -> HostCall? in
            // A `log` over a second's bytes is dropped whatever it holds: one that says so at
            // its start is not even read through (a frame of escapes costs the loop ~1 ms a MiB).
            if bytes.count > Self.logBytesPerSecond, bytes.starts(with: Self.logPrefix) {
                _ = admitLog(from: instance, size: bytes.count)
                return nil
            }
            let (message, env) = WorkerMessage.read(bytes, maxDepth: config.maxJSONDepth, saidHello: instance.hello != nil,
                                                    plugin: instance.identifier)
            switch message {
            case .violation(let why):
                violated(instance, why)
            case .hello(let hello):
                // It writes the taken page it was given at its spawn (SPEC §15).
                if hello.takenPage == true { instance.crash.workerWritesPage(linkMarks: hello.linkMarks == true, kept: hello.takenPageKept == true) }
                effects.post(.hello(instance, hello))
            case .reply(let id):
                guard let env else { return nil }
                // The taken mark, read with the replies it comes with anyway: a worker that takes it
                // back later is caught (its word then counts for nothing).
                if let lie = instance.crash.observe() {
                    logger.warning("the worker's taken mark went back (\(lie)): its word on which calls its plugin started is ignored",
                                   metadata: ["plugin": "\(instance.identifier)", "pid": "\(instance.pid)"])
                }
                // Its bytes, if it has any, are taken (and checked) whether or not anyone waits for it.
                let payload: Payload?
                switch receivePayload(from: instance, env, bytes) {
                case .failure(let violation):
                    violated(instance, violation.reason)
                    return nil
                case .success(let p): payload = p
                }
                // Late replies to requests that timed out or were cancelled are expected (and
                // dropped); others are not, nor a flood of them.
                if !deliverReply(from: instance, id: id, env, bytes, payload: payload) {
                    if !instance.pending.wasIssued(id) {
                        violated(instance, "reply to id \(id), which was never asked")
                    } else if instance.lateReplies.admit(now: .now) == .flood {
                        violated(instance, "flooding: more than \(instance.lateReplies.floodLimit) replies in one second to requests already answered or given up on")
                    }
                }
            case .pong(let id):
                // A pong can only answer a ping sent: one for an id not yet given out was made up
                // ahead of the ping (a plugin keeping the watchdog quiet while its receive blocks).
                if let id, !instance.pending.wasIssued(id) { violated(instance, "pong for id \(id), which was never pinged") }
                instance.ponged(id: id)
            case .request(let kind):
                guard let env else { return nil }
                switch receivePayload(from: instance, env, bytes) {
                case .failure(let violation): violated(instance, violation.reason)
                case .success(let payload): return pluginRequest(instance, kind, env, bytes, payload: payload)
                }
            case .stream(let kind):
                if let env, let why = streamMessage(from: instance, kind, env, bytes, frame: frame) {
                    violated(instance, why)
                }
            case .cancel(let id):
                if let entry = instance.outgoing.remove(id) { shared.cancelInFlight([id: entry]) }
            case .log:
                log(from: instance, bytes)
            case .linkCalls:
                linkCallsReported(by: instance, bytes)
            case .exit(let notice):
                instance.exitNotice = notice
                // It is ending: its restart, if immediate, can start now (Lifecycle/Standby.swift).
                effects.post(.ending(instance))
                // Debug only: the exit's own line, once the process has ended, carries the message
                // (if the exit code confirms the notice).
                if let notice {
                    logger.debug("exit notice: \(notice.reason.rawValue): \(notice.message)",
                                 metadata: ["plugin": "\(instance.identifier)", "reason": "\(notice.reason.rawValue)"])
                }
            }
            return nil
        }
    }

    /// How a `log` frame starts: one over a second's bytes is dropped without being read through.
    private static let logPrefix = Array(#"{"type":"log""#.utf8)

    /// Counts a `log` of `size` bytes in its worker's window, by size too, before any is decoded
    /// (a few huge messages cost the loop as much to decode as a flood of small ones): whether it
    /// may be shown. What was dropped is said; past the config's `floodLogsPerSecond` the worker is
    /// flooding and is dropped.
    private func admitLog(from instance: WorkerInstance, size: Int) -> Bool {
        let wasDropping = instance.logWindow.isDropping
        switch instance.logWindow.admit(now: .now, size: size) {
        case .flood:
            violated(instance, "flooding: more than \(config.floodLogsPerSecond) log messages in one second")
            return false
        case .drop(let droppedBefore):
            reportDropped(droppedBefore, by: instance)
            // The first drop of a second is said at once, and how many when the second ends (or
            // with the next message, if that comes first): a plugin may send nothing more.
            if instance.logWindow.droppedInWindow == 1 {
                let end = instance.logWindow.windowEnd
                loop.assumeIsolated().scheduleTask(deadline: end.deadline) { [self] in
                    reportDropped(instance.logWindow.takeDroppedIfEnded(now: .now), by: instance)
                }
            }
            if !wasDropping || droppedBefore > 0 {
                logger.warning(size > Self.logBytesPerSecond
                               ? "dropped a log message of \(size) bytes: one may have at most \(Self.logBytesPerSecond) (\(Self.logBytesPerSecond >> 20) MiB)"
                               : "dropping log messages over \(Self.logsPerSecond) or \(Self.logBytesPerSecond >> 20) MiB a second",
                               metadata: ["plugin": "\(instance.identifier)"])
            }
            return false
        case .admit(let droppedBefore):
            reportDropped(droppedBefore, by: instance)
            return true
        }
    }

    /// A plugin's `log` message, at most `logsPerSecond` a second (`admitLog`).
    private func log(from instance: WorkerInstance, _ bytes: UnsafeRawBufferPointer) {
        guard admitLog(from: instance, size: bytes.count) else { return }
        guard let log = try? ProtocolJSON.decode(PluginLogLine.self, from: bytes) else {
            return violated(instance, "malformed log message: not JSON in UTF-8, its level or message is missing or not a string, or its metadata is not an object")
        }
        // `plugin` and `pid` are the supervisor's to say, and a line's text cannot start another
        // line: a plugin cannot write lines in another's name, nor another worker's (an update
        // runs two of one plugin for a moment).
        var meta = PluginLogLine.logged(log.metadata ?? [:])
        meta["plugin"] = "\(instance.identifier)"
        meta["pid"] = "\(instance.pid)"
        logger.log(level: Logger.Level(rawValue: log.level) ?? .info, "\(LogText.shown(log.message))", metadata: meta)
    }
}

extension Router {
    /// Says how many of `instance`'s log messages the last second dropped, if any.
    func reportDropped(_ count: Int, by instance: WorkerInstance) {
        guard count > 0 else { return }
        shared.metrics.logsDropped(instance.identifier, source: "log", count)
        logger.warning("dropped \(count) log messages over \(Self.logsPerSecond) or \(Self.logBytesPerSecond >> 20) MiB a second",
                       metadata: ["plugin": "\(instance.identifier)"])
    }

    /// `instance` broke the protocol: its gate closes now, so nothing else it sent is acted on
    /// (not even the rest of what was read with this frame), and the lifecycle kills it.
    func violated(_ instance: WorkerInstance, _ why: String) {
        guard instance.gate.violated(why) else { return }
        effects.post(.protocolViolation(instance, why))
    }
}
