#if canImport(Glibc)
import Glibc
#endif
import Logging
import NIOCore
import PluginProtocol
import SupervisorCore

/// Direct links for control clients (SPEC §12 "one hop", docs/protocol.md "Direct links for
/// clients"): after the supervisor has checked a client's call (the target exists and runs), the
/// client may ask for a link to the target's worker, as a plugin's worker gets one to its
/// dependency, and send its later calls over it. The callee's worker serves them as it serves a
/// peer link (`peer` is empty: a client's calls have no `from`); the client keeps their deadlines,
/// reports their counts (`linkCalls`, so metrics count every call), gives the link back when told
/// (`unlink`, the callee drains), and calls through the supervisor again when the link ends.
extension Router {
    /// `link`: a link from `connection` to `target`'s worker; answered with where to pick it up.
    func linkClient(_ connection: ControlConnection, to target: String, _ origin: ReplyOrigin, handoff: LinkHandoff?) {
        guard config.peerLinks, let handoff else {
            return outbox.answer(origin, error: ErrorBody(.unavailable, "direct links are switched off here (peerLinks: false, or no control socket); calls go through the supervisor"))
        }
        guard let record = table[target] else {
            return outbox.answer(origin, error: ErrorBody(.notFound, "no plugin \(target) is installed"))
        }
        guard !shared.logCalls, !config.isDebugged(target) else {
            return outbox.answer(origin, error: ErrorBody(.unavailable, "calls to \(target) are logged or debugged one by one: they go through the supervisor"))
        }
        guard record.phase == .running, let callee = record.instance, callee.phase == .running, let calleeChannel = callee.descriptorChannel else {
            return outbox.answer(origin, error: ErrorBody(.unavailable, "\(target) cannot take a direct link now (\(record.phase.shown)); call through the supervisor"))
        }
        if let existing = connection.linksOut[target] {
            return outbox.answer(origin, error: ErrorBody(.badRequest, "this client holds link \(existing.number) to \(target) already"))
        }
        let link: PeerLink, callerEnd: Int32
        switch openLink(for: .client(connection), to: callee, calleeChannel) {
        case .success(let opened): (link, callerEnd) = opened
        case .failure(.socketpair(let why)): return outbox.answer(origin, error: ErrorBody(.unavailable, "socketpair: \(why)"))
        case .failure(.calleeTakesNone): return outbox.answer(origin, error: ErrorBody(.unavailable, "\(target)'s worker takes no links"))
        }
        let token = handoff.offer(callerEnd, link: link.number, to: ObjectIdentifier(connection))
        connection.linksOut[target] = link
        connection.linkedCallees.insert(target)
        callee.linksIn[ObjectIdentifier(link)] = link
        table.watch(callee)
        let timeoutMs = timeout(for: record, requested: nil)
        outbox.respond(origin) {
            try ProtocolJSON.encode(LinkGrant(link: link.number, token: token, socket: handoff.path, timeoutMs: timeoutMs))
        }
    }

    /// The callee drains: the client is told to stop using the link and answers once the calls it
    /// sent over it are settled (at the latest at the drain's deadline).
    func unlinkClient(_ connection: ControlConnection, _ link: PeerLink) {
        guard !connection.closed else { return settle(link) }
        let id = connection.nextHostCallID
        connection.nextHostCallID += 1
        let deadline = loop.assumeIsolated().scheduleTask(in: .milliseconds(Int64(config.drainTimeoutMs))) { [self] in
            if connection.unlinks.removeValue(forKey: id) != nil { settle(link) }
        }
        connection.unlinks[id] = (link, deadline)
        var frame = outbox.encoder(.unlink, for: connection.channel)
        frame.uint("id", id)
        frame.string("peer", link.callee.identifier)
        frame.uint("link", link.number)
        outbox.write(frame.finish(), to: connection.channel)
    }

    /// A client's `reply` to an `unlink`: true if it was one.
    func clientUnlinked(_ connection: ControlConnection, id: UInt64) -> Bool {
        guard let unlink = connection.unlinks.removeValue(forKey: id) else { return false }
        unlink.deadline.cancel()
        settle(unlink.link)
        return true
    }

    /// A client went away: its links are settled (the callees see their ends close by themselves),
    /// and what was offered to it at the handoff socket and not picked up is closed.
    func clientGone(_ connection: ControlConnection) {
        shared.handoff?.withdraw(from: ObjectIdentifier(connection))
        for unlink in connection.unlinks.values {
            unlink.deadline.cancel()
            settle(unlink.link)
        }
        connection.unlinks = [:]
        for link in connection.linksOut.values { settle(link) }
        connection.linksOut = [:]
    }

    /// A client's `linkCalls` report (`countLinkCalls`).
    func linkCallsReported(by connection: ControlConnection, _ bytes: UnsafeRawBufferPointer) -> ErrorBody? {
        guard let report = try? ProtocolJSON.decode(CallHop.LinkCalls.self, from: bytes) else {
            return ErrorBody(.protocolViolation, "malformed linkCalls message")
        }
        return countLinkCalls(report, from: .client(connection), everLinked: connection.linkedCallees.contains(report.target))
            .map { ErrorBody(.protocolViolation, $0) }
    }
}

/// The answer to a client's `link` request.
struct LinkGrant: Codable {
    var link: UInt64
    var token: String
    /// Where to pick the link's descriptor up (`LinkHandoff`).
    var socket: String
    /// The callee's call timeout, for calls that name none.
    var timeoutMs: Int
}

/// The embedding program as a caller over direct links (`Supervisor.linkForHost`): its links by
/// callee, and how to take one back (the program answers once the calls over it are settled).
final class HostCaller {
    var linksOut: [String: PeerLink] = [:]
    /// Its links whose worker died, for the calls it sends again (`afterLink`, LinkMarks.swift).
    var endedLinks = EndedLinks()
    let unlink: (_ link: UInt64, _ given: @escaping @Sendable () -> Void) -> Void

    init(unlink: @escaping (_ link: UInt64, _ given: @escaping @Sendable () -> Void) -> Void) {
        self.unlink = unlink
    }
}

extension Router {
    /// A direct link from the embedding program to `target`'s worker: the program's end, or nil
    /// when there can be none now (the call goes through the loop).
    func linkHost(_ host: HostCaller, to target: String) -> (fd: Int32, link: UInt64, timeoutMs: Int)? {
        guard config.peerLinks, !shared.logCalls, !config.isDebugged(target), host.linksOut[target] == nil,
              let record = table[target], record.phase == .running, let callee = record.instance, callee.phase == .running,
              let calleeChannel = callee.descriptorChannel else { return nil }
        guard case .success(let opened) = openLink(for: .host(host), to: callee, calleeChannel) else { return nil }
        host.linksOut[target] = opened.link
        callee.linksIn[ObjectIdentifier(opened.link)] = opened.link
        table.watch(callee)
        return (opened.callerEnd, opened.link.number, timeout(for: record, requested: nil))
    }

    /// The program's counts of the calls it sent over its links (`linkCalls`, as a client's; the
    /// program is trusted, so counts that cannot be are dropped, not a violation).
    func hostLinkCalls(_ host: HostCaller, _ report: CallHop.LinkCalls) {
        _ = countLinkCalls(report, from: .host(host), everLinked: true)
    }
}
