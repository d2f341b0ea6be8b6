import Bundles
import Logging
import NIOCore
import PluginProtocol
import Protocol
import SupervisorCore

/// Moves requests and answers between CLI clients, plugins and the supervisor itself, without
/// decoding payloads: ids are rewritten, payload bytes are copied untouched into the outgoing frame.
/// Every request sent to a worker is in that worker's `pending` table until exactly one of these
/// settles it: its reply (`deliverReply`), its deadline (`expire`), its worker's end (`Lifecycle.settleHeld`),
/// or its caller going away (`cancelInFlight`).
final class Router: SupervisorComponent {
    let shared: Shared
    /// The rules of a forwarded request (timeout, frame, trace context: SPEC §3), shared with the
    /// workers that forward over peer links; its trace ids are the loop's.
    private var hop = CallHop()
    /// The last peer link's number (PeerLinks.swift).
    var nextLinkNumber: UInt64 = 0
    /// Workers taken over in an upgrade asked for their taken page now, and those waiting to be
    /// (TakenPageAgain.swift): the rule is the core's, the workers waiting their turn the driver's.
    var pageAsks = PageAsks<ObjectIdentifier>()
    var pageAsksWaiting: [ObjectIdentifier: WorkerInstance] = [:]

    init(_ shared: Shared) {
        self.shared = shared
    }

    static let logsPerSecond = 200
    static let logBytesPerSecond = 1 << 20
    static let lateRepliesPerSecond = 20_000

    // MARK: Requests to plugins

    /// The timeout for a request to `record` (`CallHop.timeoutMs`): the request's own, else the
    /// plugin's, else the default; a day for a plugin run with `--debug`.
    func timeout(for record: PluginRecord, requested: UInt64?) -> Int {
        if config.isDebugged(record.identifier) { return SupervisorConfig.longestTimeoutMs }
        return CallHop.timeoutMs(requested: requested, otherwise: record.manifest.limits.callTimeoutMs ?? config.callTimeoutMs)
    }

    /// Sends a `call` or `open` to the plugin `target`, answering `origin` when it replies.
    /// Returns an error instead when the target cannot take it now.
    /// A plugin that is coming up or draining for a planned stop gets it later (Routing/Queueing.swift, State/WaitQueue.swift).
    /// `deadline`: a queued request's own, when it is finally forwarded.
    /// `payload`: the descriptors of bytes the request carries (Routing/Payloads.swift), handed to
    /// the target's worker just before the request (or kept with it while it waits).
    func forward(_ kind: MessageKind, to target: String, from caller: String?, env: Envelope, bytes: UnsafeRawBufferPointer,
                 origin: ReplyOrigin, deadline: Instant? = nil, payload: Payload? = nil, attempts: Attempts = .first) -> ErrorBody? {
        guard let record = table[target] else {
            return ErrorBody(.notFound, "no plugin \(target) is installed")
        }
        let metrics = callMetrics(of: record)
        switch Route.decide(record.routeTarget, named: target, shuttingDown: isShuttingDown) {
        case .forward:
            // An event for one plugin (`send`) that waited for it: sent as `send` sends it, now, so
            // that the requests released after it (`forwardWaiting`) reach the plugin after it.
            if kind == .send {
                effects.now(.replay(kind, target: target, frame: Array(bytes), origin: origin))
                return nil
            }
        case .wait: return enqueue(kind, for: record, from: caller, env: env, bytes: bytes, origin: origin, deadline: deadline, payload: payload,
                                   attempts: attempts)
        case .activate:
            // It waits, as for a starting plugin, and the plugin comes up for it (SPEC §16).
            if let refused = enqueue(kind, for: record, from: caller, env: env, bytes: bytes, origin: origin, deadline: deadline,
                                     payload: payload, attempts: attempts) { return refused }
            effects.post(.activate(record, by: QueuedRequest.trigger(kind, event: Envelope.string(bytes, env.name))))
            return nil
        case .refuse(let error):
            metrics.count(.unavailable)
            return error
        }
        // `forward` means a connected serving worker.
        guard let instance = record.instance, let channel = instance.channel else { preconditionFailure("routed to a worker without a socket") }
        let handsDescriptors = payload?.hasDescriptors ?? false
        if let payload, handsDescriptors, let refused = handOver(payload, to: instance) {
            metrics.count(.unavailable)
            return refused
        }
        let id = instance.takeID()
        // Written straight into the buffer that is sent, the request's bytes copied untouched.
        let buffer = channel.allocator.buffer(capacity: CallHop.frameCapacity(forwarding: bytes.count, from: caller) + 48)
        let (frame, trace) = hop.forward(kind, id: id, from: caller, env, in: bytes, into: consume buffer)
        let now = NIODeadline.now()
        record.lastTraffic = now
        let deadline = deadline ?? now.instant.adding(milliseconds: timeout(for: record, requested: env.timeoutMs))
        let log = shared.logCalls
            ? CallLog(label: kind == .call ? "\(target).\(Envelope.string(bytes, env.method) ?? "")" : Envelope.string(bytes, env.uri) ?? "", trace: CallTrace(trace))
            : nil
        let flow = streamFlow(kind, env, to: record, callDeadline: deadline)
        let due = flow?.deadline(after: now.instant) ?? deadline
        // Kept to go to the next worker if this one dies holding it (SPEC §15), a stream of answers
        // too (its plugin, never started, sent no chunk: the next worker's stream is the whole
        // one); not a call with an input stream (the chunks it took are not kept) nor one whose
        // descriptors went to this worker.
        let resend = !env.input && !handsDescriptors ? Resend(frame: frame, caller: caller, attempts: attempts) : nil
        instance.crash.watermark.sent(id)
        // Something inside from now on: the health tick watches it (once; it stays watched while busy).
        if instance.pending.isEmpty { table.watch(instance) }
        instance.pending.insert(PendingRequest(origin: origin, deadline: due, what: kind == .call ? .call : .open,
                                              call: CallFacts(started: now, metrics: metrics, log: log), stream: flow, resend: resend), id: id)
        deadlines.due(due.deadline)
        switch origin {
        case .client(let connection, let clientID): connection.inFlight[clientID] = (instance, id)
        case .plugin(let caller, let callerID): caller.outgoing.add(callerID, callee: instance, id: id, bytes: bytes.count)
        case .host(let request): request.inFlight = (instance, id)
        case .local: break
        }
        outbox.write(frame, to: channel)
        if let flow, case .client(let connection, let clientID) = origin, let early = connection.waitingStreams.removeValue(forKey: clientID) {
            adopt(early, into: flow, id: id, at: instance, to: channel)
        }
        // A plugin's call has reached its dependency (now, or from the wait queue once it runs):
        // the next ones may go over a peer link.
        if kind == .call, case .plugin(let caller, _) = origin { offerLink(from: caller, to: target) }
        return nil
    }

    /// `record`'s call counters, looked up in the registry on its first call and kept on the record
    /// (read only when it is there: no write on the call path).
    @inline(__always)
    private func callMetrics(of record: PluginRecord) -> CallMetrics {
        if let known = record.callMetrics { return known }
        let made = metrics.calls(record.identifier)
        record.callMetrics = made
        return made
    }

    /// Checks a `call`/`open` request's fields; returns the target plugin's identifier.
    func validateRequest(_ kind: MessageKind, _ env: Envelope, _ bytes: UnsafeRawBufferPointer) -> Result<String, ErrorBody> {
        if kind == .call {
            guard let target = Envelope.string(bytes, env.target), !target.isEmpty else {
                return .failure(ErrorBody(.badRequest, "call needs a \"target\" string"))
            }
            guard Envelope.string(bytes, env.method) != nil else {
                return .failure(ErrorBody(.badRequest, "call needs a \"method\" string"))
            }
            return .success(target)
        }
        guard let text = Envelope.string(bytes, env.uri) else {
            return .failure(ErrorBody(.badRequest, "open needs a \"uri\" string"))
        }
        guard let uri = PluginURI(text) else {
            return .failure(ErrorBody(.badRequest, "'\(text)' is not a plugin://<identifier>/<path> URI"))
        }
        return .success(uri.identifier)
    }

    /// A plugin calls another plugin or opens a URI: allowed only towards its declared dependencies.
    /// A call to `@host` is returned: the engine hands it to the program's methods.
    func pluginRequest(_ instance: WorkerInstance, _ kind: MessageKind, _ env: Envelope, _ bytes: UnsafeRawBufferPointer,
                       payload: Payload? = nil) -> HostCall? {
        guard let id = env.id else {
            violated(instance, "\(kind.rawValue) without an id")
            return nil
        }
        guard let channel = instance.channel else { return nil }
        if let why = instance.unread.request(full: !channel.isWritable, waiting: {
            (try? channel.syncOptions?.getOption(ChannelOptions.bufferedWritableBytes)) ?? 0
        }) {
            violated(instance, why)
            return nil
        }
        let target: String
        switch validateRequest(kind, env, bytes) {
        case .failure(let error):
            outbox.write(outbox.errorFrame(id: id, error, for: channel), to: channel)
            return nil
        case .success(let t): target = t
        }
        // A method of the program the supervisor runs in (SPEC §12): its own permission, not a dependency.
        if kind == .call, target == HostMethods.target {
            guard payload?.hasDescriptors != true else {
                let refused = ErrorBody(.badRequest, "bytes of more than \(Attachments.inlineLimit >> 10) KiB cannot be sent to the host's methods (docs/protocol.md \"Bytes\")")
                outbox.write(outbox.errorFrame(id: id, refused, for: channel), to: channel)
                return nil
            }
            return HostCall(id: id, env: env)
        }
        // What the supervisor holds for its calls in flight is bounded (`OutgoingCalls`).
        if let refused = instance.outgoing.refusal(caller: instance.identifier, adding: bytes.count, limit: config.heldBytesLimit) {
            if let callee = table[target] { callMetrics(of: callee).count(.unavailable) }
            let now = NIODeadline.now()
            if instance.lastRefusedForLimits.map({ now - $0 > .minutes(1) }) ?? true {
                instance.lastRefusedForLimits = now
                logger.warning("\(refused.message) (calls are refused until some are answered; said once a minute)",
                               metadata: ["plugin": "\(instance.identifier)", "pid": "\(instance.pid)"])
            }
            outbox.write(outbox.errorFrame(id: id, refused, for: channel), to: channel)
            return nil
        }
        // The caller's own version decides (during an update, the old and the new one may differ).
        guard instance.manifest.dependencies.contains(where: { $0.identifier == target }) else {
            if let callee = table[target] { callMetrics(of: callee).count(.denied) }
            let denied = ErrorBody(.denied, "\(instance.identifier) may only call its declared dependencies, and \(target) is not one")
            outbox.write(outbox.errorFrame(id: id, denied, for: channel), to: channel)
            return nil
        }
        if let refused = payload.flatMap({ oversized($0) }) {
            outbox.write(outbox.errorFrame(id: id, refused, for: channel), to: channel)
            return nil
        }
        // Sent again by its worker after the peer link it was on ended with its callee (SPEC §15).
        var attempts = Attempts.first
        if let afterLink = env.afterLink {
            switch sentAgain(kind, to: target, env, bytes, afterLink, endedLinks: instance.endedLinks) {
            case .failure(let error):
                outbox.write(outbox.errorFrame(id: id, error, for: channel), to: channel)
                return nil
            case .success(let counted): attempts = counted
            }
        }
        if let error = forward(kind, to: target, from: instance.identifier, env: env, bytes: bytes, origin: .plugin(instance, id: id),
                               payload: payload, attempts: attempts) {
            outbox.write(outbox.errorFrame(id: id, error, for: channel), to: channel)
        }
        return nil
    }

    /// A plugin's call to a method of the program the supervisor runs in (`@host`), read from the
    /// frame at hand.
    struct HostCall {
        var id: UInt64
        var env: Envelope
    }

    // MARK: Settling requests

    /// A worker answered request `id`: the answer goes to whoever asked.
    /// `payload`: the bytes the reply carries (Routing/Payloads.swift), passed on to whoever asked:
    /// a control client picks its descriptors up by token, the embedding program gets them as they
    /// are, a plugin's worker gets them on its payload channel.
    func deliverReply(from instance: WorkerInstance, id: UInt64, _ env: Envelope, _ bytes: UnsafeRawBufferPointer, payload: Payload? = nil) -> Bool {
        guard let request = instance.pending.settle(id) else { return false }
        defer { shared.callLeft(instance) }
        shared.settled(request, env.error == nil ? .ok : .error, by: instance)
        let refused = payload.flatMap { oversized($0) }
        switch request.origin {
        case .client(let connection, let clientID):
            connection.answered()
            connection.inFlight[clientID] = nil
            guard !connection.closed else { return true }
            let channel = connection.channel
            if let refused {
                outbox.write(outbox.errorFrame(id: clientID, refused, for: channel), to: channel)
                return true
            }
            guard let payload else {
                outbox.write(replyFrame(id: clientID, env, bytes, for: channel), to: channel)
                return true
            }
            var frame = outbox.encoder(.reply, for: channel, capacity: bytes.count)
            frame.uint("id", clientID)
            frame.answer(of: env, in: bytes)
            guard let written = attach(payload, to: frame, bytes, for: connection) else {
                let none = ErrorBody(.unavailable, "the answer's bytes are passed as descriptors, and this supervisor has no handoff socket for them")
                outbox.write(outbox.errorFrame(id: clientID, none, for: channel), to: channel)
                return true
            }
            outbox.write(written, to: channel)
        case .plugin(let caller, let callerID):
            caller.outgoing.remove(callerID)
            guard let channel = caller.channel else { return true }
            if let payload {
                if let error = refused ?? handOver(payload, to: caller) {
                    outbox.write(outbox.errorFrame(id: callerID, error, for: channel), to: channel)
                    return true
                }
                var frame = outbox.encoder(.reply, for: channel, capacity: bytes.count)
                frame.uint("id", callerID)
                frame.answer(of: env, in: bytes)
                outbox.write(attachForWorker(payload, to: frame, bytes), to: channel)
                return true
            }
            outbox.write(replyFrame(id: callerID, env, bytes, for: channel), to: channel)
        case .local(let done):
            if let e = env.error {
                done(.failure(Self.errorBody(bytes[e])))
            } else {
                done(.success(env.result.map { Array(bytes[$0]) }))
            }
        case .host(let request):
            if let e = env.error {
                request.settle(.failure(Self.errorBody(bytes[e])))
            } else if let refused {
                request.settle(.failure(refused))
            } else {
                if let payload {
                    request.attached(Supervisor.HostBytes(attachments: payload.list, descriptors: payload.take(),
                                                          inline: payload.tail.map { Array(bytes[$0]) } ?? []))
                }
                request.settle(.success(env.result.map { Array(bytes[$0]) } ?? Array("null".utf8)))
            }
        }
        return true
    }

    /// A reply's `error` object; a malformed one is the plugin's error all the same.
    static func errorBody(_ bytes: Slice<UnsafeRawBufferPointer>) -> ErrorBody {
        (try? ProtocolJSON.decode(ErrorBody.self, from: UnsafeRawBufferPointer(rebasing: bytes)))
            ?? ErrorBody(.pluginError, "malformed error object")
    }

    private func replyFrame(id: UInt64, _ env: Envelope, _ bytes: UnsafeRawBufferPointer, for channel: Channel) -> ByteBuffer {
        var frame = outbox.encoder(.reply, for: channel, capacity: bytes.count)
        frame.uint("id", id)
        frame.answer(of: env, in: bytes)
        return frame.finish()
    }
}

extension RateWindow {
    /// A worker's `log` messages: `Router.logsPerSecond` and `Router.logBytesPerSecond` shown,
    /// more than `floodLimit` a second a flood.
    static func logs(floodLimit: Int) -> RateWindow {
        RateWindow(limit: Router.logsPerSecond, floodLimit: floodLimit, byteLimit: Router.logBytesPerSecond)
    }
}
