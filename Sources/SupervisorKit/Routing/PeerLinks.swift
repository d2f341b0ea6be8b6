#if canImport(Glibc)
import Glibc
#endif
import CLinuxSupport
import Logging
import NIOCore
import PluginProtocol
import SupervisorCore

/// A direct link between a calling plugin's worker and the worker of one of its dependencies
/// (docs/protocol.md "Peer links"). The supervisor makes it and keeps track of it; the calls over
/// it never pass through here (the workers do what `Router.forward` does for them, see
/// Sources/PluginWorker/PeerLinks.swift).
final class PeerLink {
    let number: UInt64
    let caller: Caller
    let callee: WorkerInstance
    /// The caller was told to stop using it (the callee is draining) and has not answered yet.
    var unlinking = false
    /// The callee's word for the link's mark, and a duplicate of the callee's end, held until the
    /// mark is read at the callee's death (LinkMarks.swift); nil and -1 for a link without.
    var markSlot: Int?
    var witness: Int32 = -1

    /// Who calls over it: a plugin's worker, or a control client (ClientLinks.swift).
    enum Caller {
        case worker(WorkerInstance)
        case client(ControlConnection)
        /// The program the supervisor is embedded in (`Supervisor.linkForHost`).
        case host(HostCaller)

        /// Its links by callee identifier.
        var linksOut: [String: PeerLink] {
            switch self {
            case .worker(let w): w.linksOut
            case .client(let c): c.linksOut
            case .host(let h): h.linksOut
            }
        }
    }

    init(number: UInt64, caller: Caller, callee: WorkerInstance) {
        self.number = number
        self.caller = caller
        self.callee = callee
    }

    /// The caller's links by callee identifier, where this one is kept.
    var callerKeepsIt: Bool { caller.linksOut[callee.identifier] === self }

    func forgetAtCaller() {
        guard callerKeepsIt else { return }
        switch caller {
        case .worker(let w): w.linksOut[callee.identifier] = nil
        case .client(let c): c.linksOut[callee.identifier] = nil
        case .host(let h): h.linksOut[callee.identifier] = nil
        }
    }
}

extension Router {
    /// After a call from `caller` to `target` went through here: a link for the next ones, when
    /// there is none yet and both workers can take one. The permission check was the call's
    /// (a declared dependency); a link lives as long as both workers, or until the callee drains.
    /// Not while calls are logged one by one (debug level): those would skip the log.
    func offerLink(from caller: WorkerInstance, to target: String) {
        guard config.peerLinks, !shared.logCalls, caller.linksOut[target] == nil, caller.phase == .running,
              let callerChannel = caller.descriptorChannel, let record = table[target], let callee = record.instance, callee.phase == .running,
              let calleeChannel = callee.descriptorChannel, !config.isDebugged(record.identifier) else { return }
        // The callee's end first: a call the caller sends at once waits in the socket until it is read.
        let opened: (link: PeerLink, callerEnd: Int32)
        switch openLink(for: .worker(caller), to: callee, calleeChannel) {
        case .success(let made): opened = made
        case .failure(.socketpair(let why)):
            return logger.warning("cannot make a peer link from \(caller.identifier) to \(record.identifier): socketpair: \(why); its calls go through the supervisor",
                                  metadata: ["plugin": "\(caller.identifier)"])
        case .failure(.calleeTakesNone): return
        }
        let link = opened.link
        defer { close(opened.callerEnd) }
        guard sendOrder(PeerLinkOrder(kind: .caller, peer: callee.identifier, link: link.number, timeoutMs: timeout(for: record, requested: nil),
                                      streamIdleTimeoutMs: streamIdleTimeout(for: record)),
                        with: opened.callerEnd, to: caller, callerChannel) else { return link.release() }
        caller.linksOut[callee.identifier] = link
        caller.linkedCallees.insert(callee.identifier)
        callee.linksIn[ObjectIdentifier(link)] = link
        table.watch(callee)
    }

    /// Why `openLink` made no link.
    enum LinkOpenFailure: Error {
        case socketpair(String)
        /// The callee's worker took no order (it takes no links, or its channel failed: `sendOrder`).
        case calleeTakesNone
    }

    /// A new link from `caller` to `callee`'s worker, as every kind of caller gets one: a socket
    /// pair, the next link number, the callee's mark word and witness (LinkMarks.swift), and the
    /// callee's end handed to its worker with its order. Returns the link and the caller's end (the
    /// caller's to hand over and close); the caller registers it once its own end is placed.
    func openLink(for caller: PeerLink.Caller, to callee: WorkerInstance, _ calleeChannel: Int32) -> Result<(link: PeerLink, callerEnd: Int32), LinkOpenFailure> {
        var pair: [Int32] = [-1, -1]
        guard socketpair(AF_UNIX, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0, &pair) == 0 else {
            return .failure(.socketpair(String(cString: strerror(errno))))
        }
        defer { close(pair[1]) }
        nextLinkNumber += 1
        let link = PeerLink(number: nextLinkNumber, caller: caller, callee: callee)
        (link.markSlot, link.witness) = PeerLink.mark(for: callee, calleeEnd: pair[1])
        let peer = if case .worker(let w) = caller { w.identifier } else { "" }
        guard sendOrder(PeerLinkOrder(kind: .callee, peer: peer, link: link.number, markSlot: link.markSlot), with: pair[1], to: callee, calleeChannel) else {
            link.release()
            close(pair[0])
            return .failure(.calleeTakesNone)
        }
        return .success((link, pair[0]))
    }

    /// Sends one order on a worker's descriptor channel. A failure ends new links for that worker (its
    /// channel may hold half an order): its calls go through the supervisor, as before links; the
    /// links it has go on (they are taken back on the protocol socket).
    func sendOrder(_ order: PeerLinkOrder, with fd: Int32, to instance: WorkerInstance, _ channel: Int32) -> Bool {
        guard let frame = try? ProtocolJSON.frame(order) else { return false }
        let sent = frame.withUnsafeBytes { cls_send_with_fd(channel, fd, $0.baseAddress, $0.count) }
        if sent == frame.count { return true }
        closeDescriptorChannel(instance)
        // A worker whose seccomp filter has no listener closed the channel: it takes no links.
        if sent == -Int(EPIPE) || sent == -Int(ECONNRESET) {
            logger.debug("the worker of \(instance.identifier) (pid \(instance.pid)) takes no peer links (it closed their channel)",
                         metadata: ["plugin": "\(instance.identifier)"])
            return false
        }
        let why = sent < 0 ? String(cString: strerror(Int32(-sent))) : "only \(sent) of \(frame.count) bytes went"
        logger.warning("cannot hand a peer link to the worker of \(instance.identifier) (pid \(instance.pid)): \(why); its calls go through the supervisor from now on",
                       metadata: ["plugin": "\(instance.identifier)"])
        return false
    }

    func closeDescriptorChannel(_ instance: WorkerInstance) {
        if let fd = instance.descriptorChannel { close(fd) }
        instance.descriptorChannel = nil
    }

    /// `callee` is about to drain (SPEC §8): every caller linked to it is told to stop using its
    /// link and answers once the calls it sent over it are settled; until then the callee counts
    /// as having calls inside (`WorkerInstance.hasCallsInside`).
    /// The `unlink` goes on the caller's protocol socket, where nothing is lost while it is
    /// connected (a caller that is not is ending, and its link with it).
    func unlinkCallers(of callee: WorkerInstance) {
        for link in callee.linksIn.values.sorted(by: { $0.number < $1.number }) where !link.unlinking {
            link.unlinking = true
            link.forgetAtCaller()
            let caller: WorkerInstance
            switch link.caller {
            case .worker(let w): caller = w
            case .client(let connection):
                unlinkClient(connection, link)
                continue
            case .host(let host):
                // The program gives it back once its calls over it are settled.
                let back = handOff((router: self, link: link))
                host.unlink(link.number) { back.execute { $0.router.settle($0.link) } }
                continue
            }
            guard let channel = caller.channel else { settle(link); continue }
            let deadline = Instant.now.adding(milliseconds: config.drainTimeoutMs)
            table.watch(caller)
            let id = caller.pending.add(PendingRequest(origin: .local({ [self] _ in settle(link) }), deadline: deadline, what: .unlink))
            deadlines.due(deadline.deadline)
            // `UnlinkMessage`, written as the worker reads it.
            var frame = outbox.encoder(.unlink, for: channel)
            frame.uint("id", id)
            frame.string("peer", callee.identifier)
            frame.uint("link", link.number)
            outbox.write(frame.finish(), to: channel)
        }
    }

    /// The caller gave the link back (or cannot any more). `calleeEnding`: the callee's worker is
    /// ending, and the link's mark is read at its death (its witness stays open until then).
    func settle(_ link: PeerLink, calleeEnding: Bool = false) {
        link.callee.linksIn[ObjectIdentifier(link)] = nil
        link.forgetAtCaller()
        if calleeEnding { link.callee.crash.endingLinks.append(link) } else { link.release() }
        shared.callLeft(link.callee)
    }

    /// `instance` ended: its links are gone with its descriptors (the workers at their other ends
    /// see them close and settle their calls as for a worker that ended). The callers of the links
    /// it served see them end once their marks are read, at its death (LinkMarks.swift).
    func forgetLinks(_ instance: WorkerInstance) {
        for link in instance.linksOut.values { settle(link) }
        for link in instance.linksIn.values { settle(link, calleeEnding: !instance.crash.concluded) }
        instance.linksOut = [:]
        instance.linksIn = [:]
        closeDescriptorChannel(instance)
        if let fd = instance.payloadChannel { close(fd) }
        instance.payloadChannel = nil
    }

    /// `linkCalls`: a caller's worker reports the calls it sent over its link to `target`.
    func linkCallsReported(by instance: WorkerInstance, _ bytes: UnsafeRawBufferPointer) {
        guard let report = try? ProtocolJSON.decode(CallHop.LinkCalls.self, from: bytes) else {
            return violated(instance, "malformed linkCalls message")
        }
        if let why = countLinkCalls(report, from: .worker(instance), everLinked: instance.linkedCallees.contains(report.target)) {
            violated(instance, why)
        }
    }

    /// A caller's `linkCalls` report (a worker's, a client's or the embedding program's): the calls
    /// it sent over its link to `report.target`, counted in the callee's metrics as if forwarded
    /// here. From a caller that never held a link to the target (`everLinked`; one it held may have
    /// ended here while the report was on its way), or with counts that cannot be, it is a protocol
    /// violation: the reason is returned and nothing is counted. A link that ended by itself is
    /// forgotten, so the next call through here makes a new one.
    func countLinkCalls(_ report: CallHop.LinkCalls, from caller: PeerLink.Caller, everLinked: Bool) -> String? {
        guard everLinked else { return "linkCalls for \(report.target), to which it holds no link" }
        if let problem = report.calls.problem ?? report.streams?.problem { return "linkCalls with \(problem)" }
        metrics.calls(report.target).add(report.calls)
        // Calls over the link are traffic: the callee is not idle (SPEC §16).
        if let callee = table[report.target] { callee.lastTraffic = .now() }
        if let streams = report.streams {
            let counters = metrics.streams(report.target)
            counters.opened.increment(by: streams.opened)
            counters.answer.increment(by: streams.answer)
            counters.input.increment(by: streams.input)
        }
        if let ended = report.endedLink, let link = caller.linksOut[report.target], link.number == ended {
            linkEndedByItself(link.callee)
            settle(link)
        }
        return nil
    }
}
