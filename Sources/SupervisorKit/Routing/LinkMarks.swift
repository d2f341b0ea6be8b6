#if canImport(Glibc)
import Glibc
#endif
import PluginProtocol
import Protocol
import SupervisorCore

/// The marks of direct links (SPEC §15, SupervisorCore/Replay/LinkReplay.swift): each link a
/// program or a plugin's worker holds to a worker gets a word of that worker's taken page, where the worker keeps the
/// highest id on the link it handed to its plugin, and the supervisor holds a duplicate of the
/// worker's end of the link. When the worker dies, the supervisor reads each link's word and only
/// then closes its duplicate: the caller sees its link end after the supervisor knows which of its
/// calls never started, so that each call it sends again through the supervisor (`afterLink`)
/// finds its answer recorded (`EndedLinks`, kept with the caller).
extension PeerLink {
    /// A word and a witness for a new link to `callee`, whose end of the link is `calleeEnd`; none
    /// (nil, -1) when the callee keeps no marks, its words are all given, or no descriptor is left.
    static func mark(for callee: WorkerInstance, calleeEnd: Int32) -> (slot: Int?, witness: Int32) {
        guard callee.crash.keepsLinkMarks, let slot = callee.crash.linkSlots.take() else { return (nil, -1) }
        let witness = fcntl(calleeEnd, F_DUPFD_CLOEXEC, 3)
        guard witness >= 0 else {
            callee.crash.linkSlots.give(slot)
            return (nil, -1)
        }
        return (slot, witness)
    }

    /// Settled while its callee lives: its word goes back, its witness is closed.
    func release() {
        if let markSlot { callee.crash.linkSlots.give(markSlot) }
        markSlot = nil
        closeWitness()
    }

    func closeWitness() {
        if witness >= 0 { close(witness) }
        witness = -1
    }

    /// Its callee died (`crash`, as the log says it): what its caller needs to send the calls in
    /// flight on it again, recorded with the caller; then the caller sees the link end.
    func conclude(crash: String) {
        let ended = EndedLink(callee: callee.identifier, mark: markSlot.flatMap { callee.crash.linkMark($0) }, crash: crash,
                              rules: CrashReplay(manifest: callee.manifest, flagged: callee.hello?.idempotent ?? []))
        switch caller {
        case .client(let connection): connection.endedLinks.record(number, ended)
        case .host(let host): host.endedLinks.record(number, ended)
        case .worker(let worker): worker.endedLinks.record(number, ended)
        }
        markSlot = nil
        closeWitness()
    }
}

extension WorkerInstance {
    /// It died, its page not yet concluded: every link it served is concluded (its callers see
    /// their links end).
    func concludeLinks(crash described: String) {
        for link in Array(linksIn.values) + crash.endingLinks { link.conclude(crash: described) }
        crash.endingLinks = []
    }
}

extension Router {
    /// A call sent again after the direct link it was in flight on ended with its worker
    /// (`afterLink`: `range` in `bytes`), by a program or a plugin's worker whose links' ends are
    /// `endedLinks`: the attempts it counts if it goes on (replayed: its plugin never had it;
    /// retried: idempotent, within `limits.retries`), or the error that answers it
    /// (`started: true` when its plugin may have run it). A link the caller never held, or one
    /// whose worker lives, has no record: the call counts as started.
    func sentAgain(_ kind: MessageKind, to target: String, _ env: Envelope, _ bytes: UnsafeRawBufferPointer, _ range: Range<Int>,
                   endedLinks: EndedLinks?) -> Result<Attempts, ErrorBody> {
        guard let after = try? ProtocolJSON.decode(AfterLink.self, from: UnsafeRawBufferPointer(rebasing: bytes[range])) else {
            return .failure(ErrorBody(.badRequest, "afterLink must be {\"link\": <number>, \"id\": <number>}"))
        }
        // Not installed: `forward` says so.
        guard let record = table[target] else { return .success(.first) }
        let known = endedLinks?.ended(after.link, to: target)
        let rules = known?.rules ?? CrashReplay(manifest: record.manifest, flagged: record.instance?.hello?.idempotent ?? [])
        let method = (kind == .open ? Envelope.string(bytes, env.uri) : Envelope.string(bytes, env.method)) ?? kind.rawValue
        let call = LinkedCall(method: method, deadline: Instant.now.adding(milliseconds: timeout(for: record, requested: env.timeoutMs)))
        let successor = CrashReplay.Successor.after(record.routeTarget, shuttingDown: isShuttingDown)
        switch rules.decide(afterLink: known, id: after.id, call, successor: successor, now: .now) {
        case .replay(let call):
            metrics.resent(target, replayed: 1, retried: 0)
            return .success(Attempts(retries: call.retries, crashes: call.crashes))
        case .retry(let call):
            metrics.resent(target, replayed: 0, retried: 1)
            return .success(Attempts(retries: call.retries, crashes: call.crashes))
        case .fail(_, var error, let started):
            if started { error.data = ErrorData(started: true) }
            record.callMetrics?.count(error.code == ErrorCode.timeout.rawValue ? .timeout : .unavailable)
            return .failure(error)
        case .drop:
            return .failure(ErrorBody(.unavailable, "the caller is gone"))
        }
    }
}
