#if canImport(Glibc)
import Glibc
#endif
import SupervisorCore

/// The marks of direct links (SPEC §15, SupervisorCore/Replay/LinkReplay.swift): each link a
/// program holds to a worker gets a word of that worker's taken page, where the worker keeps the
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
        case .worker: break
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
