import Logging
import NIOCore
import PluginProtocol

extension Router {
    /// One frame from a worker: parsed once here (routing fields only), then handed to whoever owns
    /// what it is about. Anything a worker may not say is a protocol violation that ends that worker.
    func workerFrame(_ instance: WorkerInstance, _ frame: ByteBuffer) {
        // A worker being killed (protocol violation, watchdog, ...) has nothing more to say.
        guard instance.killReason == nil || instance.phase.stopRequested else { return }
        frame.withUnsafeReadableBytes { bytes in
            let env: Envelope
            do {
                env = try Envelope.parse(bytes, maxDepth: config.maxJSONDepth)
            } catch {
                return lifecycle.protocolViolation(instance, "invalid frame: \(error)")
            }
            guard let kind = env.kind else {
                return lifecycle.protocolViolation(instance, "unknown message type '\(env.typeName ?? "(none)")'")
            }
            if env.badID { return lifecycle.protocolViolation(instance, "\(kind.rawValue) with an id that is not an unsigned integer") }
            if instance.hello == nil, kind != .hello, kind != .exit, kind != .log {
                return lifecycle.protocolViolation(instance, "\(kind.rawValue) before hello")
            }
            switch kind {
            case .hello:
                guard instance.hello == nil else { return lifecycle.protocolViolation(instance, "a second hello") }
                let hello: HelloMessage
                do { hello = try ProtocolJSON.decode(HelloMessage.self, from: bytes) } catch {
                    return lifecycle.protocolViolation(instance, "malformed hello: \(error)")
                }
                guard hello.protocol == Frame.protocolVersion else {
                    return lifecycle.protocolViolation(instance, "hello speaks protocol \(hello.protocol), this supervisor speaks \(Frame.protocolVersion)")
                }
                guard hello.plugin == instance.identifier else {
                    return lifecycle.protocolViolation(instance, "hello names plugin \(hello.plugin), expected \(instance.identifier)")
                }
                lifecycle.helloReceived(instance, hello)
            case .reply:
                guard let id = env.id else { return lifecycle.protocolViolation(instance, "reply without an id") }
                // Late replies to requests that timed out or were cancelled are expected; others are not.
                if !deliverReply(from: instance, id: id, env, bytes), id >= instance.nextID {
                    lifecycle.protocolViolation(instance, "reply to id \(id), which was never asked")
                }
            case .pong:
                if let ping = instance.outstandingPing, ping.id == env.id { instance.outstandingPing = nil }
            case .call, .open:
                pluginRequest(instance, kind, env, bytes)
            case .log:
                log(from: instance, bytes)
            case .linkCalls:
                linkCallsReported(by: instance, bytes)
            case .exit:
                instance.exitNotice = try? ProtocolJSON.decode(ExitNotice.self, from: bytes)
                // It is ending: its restart, if immediate, can start now (Lifecycle/Standby.swift).
                lifecycle.prepareStandby(after: instance)
                // Debug only: the exit's own line, once the process has ended, carries the message
                // (if the exit code confirms the notice).
                if let notice = instance.exitNotice {
                    logger.debug("exit notice: \(notice.reason.rawValue): \(notice.message)",
                                 metadata: ["plugin": "\(instance.identifier)", "reason": "\(notice.reason.rawValue)"])
                }
            default:
                lifecycle.protocolViolation(instance, "a worker may not send \(kind.rawValue)")
            }
        }
    }

    /// A plugin's `log` message, at most `logsPerSecond` a second; past `floodLogsPerSecond` the
    /// worker is flooding and is dropped.
    private func log(from instance: WorkerInstance, _ bytes: UnsafeRawBufferPointer) {
        switch instance.logWindow.admit(now: .now()) {
        case .flood:
            return lifecycle.protocolViolation(instance, "flooding: more than \(Self.floodLogsPerSecond) log messages in one second")
        case .drop:
            return
        case .admit(let droppedBefore):
            if droppedBefore > 0 {
                logger.warning("dropped \(droppedBefore) log messages over \(Self.logsPerSecond)/s", metadata: ["plugin": "\(instance.identifier)"])
            }
        }
        guard let log = try? ProtocolJSON.decode(LogMessage.self, from: bytes) else {
            return lifecycle.protocolViolation(instance, "malformed log message")
        }
        var meta: Logger.Metadata = ["plugin": "\(instance.identifier)"]
        for (k, v) in log.metadata ?? [:] { meta[k] = "\(v)" }
        logger.log(level: Logger.Level(rawValue: log.level) ?? .info, "\(log.message)", metadata: meta)
    }
}
