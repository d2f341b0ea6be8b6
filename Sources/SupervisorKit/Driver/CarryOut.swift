import LinuxSupport
import NIOCore
import PluginProtocol
import SupervisorCore

extension Engine {
    /// Carries out what one component asked of another: the one place where the components meet.
    func carryOut(_ effect: Effect) {
        switch effect {
        // The lifecycle's.
        case .life(let record, let actions, let exited): carryOut(actions, record, exited)
        case .protocolViolation(let instance, let why): lifecycle.protocolViolation(instance, why)
        case .hello(let instance, let hello): lifecycle.helloReceived(instance, hello)
        case .ending(let instance): lifecycle.prepareStandby(after: instance)
        case .drained(let instance): lifecycle.drained(instance)
        case .kill(let instance, let reason, let message): lifecycle.kill(instance, reason, message)
        case .settleReloads: lifecycle.settleReloads()
        case .startWaitingPlugins: lifecycle.startWaitingPlugins()
        case .startAgain(let record, let counted, let trigger, let done): lifecycle.startAgain(record, counted: counted, trigger: trigger, done)
        case .startBeside(let record, let manifest, let done): lifecycle.startBeside(record, manifest, done)
        case .stopPlugin(let record, let then): lifecycle.stopPlugin(record, then)
        case .restart(let id, let done): lifecycle.restartCommand(id, done)
        case .keepStandby(let record): if !upgradeHoldsReads { lifecycle.keepStandby(record) }
        case .move(let record, let phase): lifecycle.move(record, to: phase)

        // Routing's.
        case .forgetLinks(let instance): router.forgetLinks(instance)
        case .unlinkCallers(let callee): router.unlinkCallers(of: callee)
        case .forwardWaiting(let record): router.forwardWaiting(record)
        case .activate(let record, let trigger): lifecycle.activate(record, by: trigger)
        case .stopIdle(let record):
            if let instance = record.instance { lifecycle.stopWorker(record, instance) {} } else { record.idleStopping = nil }
        case .forget(let record, let reason):
            router.forget(record, because: reason)
            // Its dependents still coming up fail by it now (they waited for it to run).
            lifecycle.startWaitingPlugins()
        case .replay(let kind, let target, let frame, let origin): replay(kind, to: target, frame, origin)

        // Installs'.
        case .refreshResources(let record, let force): installs.refreshResources(record, force: force)
        case .warmCatalog: installs.warmCatalog()
        case .resumeUpdates: installs.resumeInterruptedUpdates()
        case .rollBack(let record, let crash, let then): then(installs.rollBackWithinGrace(record, crash: crash))

        // The host's methods'.
        case .hostCallerEnded(let instance): hostMethods.callerEnded(instance)

        // The engine's own.
        case .connect(let instance, let socket): WorkerChannel.connect(OwnedDescriptor(socket), for: instance, engine: self)
        case .startTimers: startTimers()
        case .stopTimers: stopTimers()
        case .closeControlSocket(let then):
            // What waits for work off the loop (a download) is answered before its client is cut off.
            installs.answerUnfinished()
            handoff?.stop()
            control.close().assumeIsolated().whenComplete { _ in then() }
        }
    }

    /// A request held while its target was installed on demand, routed now as the client wrote it.
    private func replay(_ kind: MessageKind, to target: String, _ frame: [UInt8], _ origin: ReplyOrigin) {
        frame.withUnsafeBytes { raw in
            guard let env = try? Envelope.parse(raw, maxDepth: config.maxJSONDepth) else {
                return outbox.answer(origin, error: ErrorBody(.badRequest, "the request could not be replayed"))
            }
            if kind == .send { return send(env, raw, origin) }
            if let error = router.forward(kind, to: target, from: nil, env: env, bytes: raw, origin: origin) {
                outbox.answer(origin, error: error)
            }
        }
    }
}
