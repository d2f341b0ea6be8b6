import CLinuxSupport
import IPC
import LinuxSupport
import PluginProtocol
import Protocol
import Synchronization
#if canImport(Glibc)
import Glibc
#endif

/// A `SupervisorClient`'s direct links to workers (one hop: docs/protocol.md, "Direct links for
/// clients").
extension SupervisorClient {
    // MARK: Direct links

    /// The plugins this client calls over a direct link now.
    public var linkedPlugins: [String] { links.plugins }

    /// Calls in flight over the direct link to `target` now (0 without one).
    package func linkCallsInFlight(to target: String) -> Int { links.link(to: target)?.callsInFlight ?? 0 }

    /// After a call went through the supervisor (so it has checked it): a direct link for the next
    /// ones, asked for in the background, once.
    func askForLink(to target: String) {
        guard directLinks, links.shouldAsk(for: target) else { return }
        Task { [weak self] in await self?.establishLink(to: target) }
    }

    func establishLink(to target: String) async {
        do {
            let grant = try HostCoding.decode(LinkGrant.self, try await request(.link) { $0.string("target", target) }, of: "link")
            let fd = try Self.pickUp(grant)
            let link = DirectLink(number: grant.link, target: target, timeoutMs: grant.timeoutMs, fd: fd,
                                  report: { [weak self] report in self?.sendControl(report) },
                                  ended: { [weak self] link in self?.links.ended(link) },
                                  pollMicroseconds: linkPollMicroseconds)
            links.granted(link)
        } catch {
            // Not now (switched off, not running, debugged): asked again later.
            links.refused(target)
        }
    }

    /// Picks the link's descriptor up where the grant says (a one-time token for it).
    static func pickUp(_ grant: LinkGrant) throws -> Int32 {
        let fd = try Handoff.redeem(grant.token, at: grant.socket, what: "the link's descriptor")
        // A received descriptor is checked before it is used: a stream socket, nothing else.
        var info = stat()
        guard fstat(fd, &info) == 0, (info.st_mode & S_IFMT) == S_IFSOCK else {
            Glibc.close(fd)
            throw ErrorBody(.unavailable, "the link's descriptor is not a socket")
        }
        return fd
    }

    /// A link's counts (`linkCalls`), on the control connection.
    func sendControl(_ report: CallHop.LinkCalls) {
        guard let link = state.withLock({ $0.link }), let frame = try? ProtocolJSON.frame(report) else { return }
        try? link.connection.sendFrame(frame)
    }

    /// The supervisor takes link `number` back (its worker is stopping): calls go through the
    /// supervisor from now on, and the link is given back once its calls are settled.
    func unlink(_ number: UInt64, answering id: UInt64, on control: Link) {
        links.unlink(number) {
            var reply = FrameBuilder(kind: .reply)
            reply.uint("id", id)
            reply.raw("result", Array("null".utf8))
            try? control.connection.sendFrame(reply.finish())
        }
    }

    struct UnlinkOrder: Decodable {
        var link: UInt64
    }

    struct LinkGrant: Decodable {
        var link: UInt64
        var token: String
        var socket: String
        var timeoutMs: Int
    }
}
