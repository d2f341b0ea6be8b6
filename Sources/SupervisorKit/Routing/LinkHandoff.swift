#if canImport(Glibc)
import Glibc
#endif
import CLinuxSupport
import CPluginABI
import IPC
import LinuxSupport
import PluginProtocol
import SupervisorCore

/// Where a control client picks up its end of a direct link to a worker (docs/protocol.md,
/// "Direct links for clients"): a second Unix socket beside the control socket
/// (`<control socket>.links`, mode 0600), served by a thread of its own, because SwiftNIO cannot
/// pass a descriptor on the control connection. The client asked for the link on its control
/// connection and got a one-time token; it connects here, sends `{"token":"…"}`, and gets one frame
/// `{"link":n}` with the descriptor attached (SCM_RIGHTS). The bytes of an answer passed as a
/// memfd are picked up the same way (`link` 0; docs/protocol.md "Bytes"). A token is good once, for `tokenLifetime`;
/// a peer of another uid, or a token that is unknown or expired, gets `{"error":…}` and nothing else.
///
/// The other way, a client hands bytes in (`put`): it sends `{"put": <length>}` with a sealed memfd
/// attached, and gets `{"token":"…"}`, which its call names in an attachment
/// (`{"length": N, "token": "…"}`); the loop redeems it (`take`) when the call comes. Checked here
/// first: one descriptor, a sealed memfd of that length, within `maxPayloadMB`.
///
/// Values only (`Sendable`): the loop offers a descriptor (`offer`), the thread hands it over.
final class LinkHandoff: Sendable {
    let path: String
    let listener: Int32
    private let offers = Guarded<[String: Offer]>([:])
    /// Bytes clients handed in, by token, until their call takes them (or they expire).
    private let deposits = Guarded<[String: Offer]>([:])
    let stopped = Guarded(false)
    /// The largest bytes a client may hand in (`maxPayloadMB`).
    private let maxPayloadBytes: Int
    /// Told each token's end (monotonic nanoseconds), from any thread: the loop's deadline timer
    /// sweeps then (`sweep`).
    private let expiring: @Sendable (Int64) -> Void

    static let tokenLifetimeNanoseconds: Int64 = 10_000_000_000

    /// A descriptor kept for a token: a link's end or an answer's memfd (`tag`: the link's number,
    /// 0 for bytes), or bytes a client handed in (`tag`: their length). `owner`: the control
    /// connection it was offered to, which withdraws it when it goes (nil: handed over by an
    /// upgrade, or a deposit).
    private struct Offer {
        let fd: Int32
        let tag: UInt64
        let until: Int64
        var owner: ObjectIdentifier? = nil
        /// Handed over by an upgrade: its owner's index in the snapshot, until that client is
        /// taken over (`adoptOwner`).
        var connection: Int? = nil
    }

    /// Offers one client may leave uncollected: past this, its oldest is withdrawn. An answer's
    /// memfd that is never collected holds the answering plugin's memory (its pages are charged
    /// to that worker's group), and a link's end a descriptor in that worker.
    static let offersPerClient = 64

    /// A descriptor kept for a token, as an upgrade hands it to the next binary.
    typealias Kept = UpgradeSnapshot.Kept

    /// The listener and what is kept for tokens, for the binary an upgrade execs (the serving
    /// thread goes on until the exec ends it: a client picking up at that moment sees the end of
    /// its connection, and its call goes through the supervisor).
    /// `owners`: a client's index among the connections handed over.
    func handOver(owners: (ObjectIdentifier) -> Int?) -> (listener: Int32, offers: [Kept], deposits: [Kept]) {
        func kept(_ table: Guarded<[String: Offer]>) -> [Kept] {
            table.withLock { $0.map { Kept(token: $0.key, fd: $0.value.fd, tag: $0.value.tag, until: $0.value.until, connection: $0.value.owner.flatMap(owners)) } }
        }
        return (listener, kept(offers), kept(deposits))
    }

    /// The client at `index` among the connections an upgrade handed over is `owner` here (nil:
    /// it could not be taken over): what was offered to it is its again, or withdrawn.
    func adoptOwner(connection index: Int, as owner: ObjectIdentifier?) {
        let left = offers.withLock { offers -> [Int32] in
            var closed: [Int32] = []
            for (token, offer) in offers where offer.connection == index {
                if let owner {
                    offers[token]?.owner = owner
                    offers[token]?.connection = nil
                } else if let gone = offers.removeValue(forKey: token) {
                    closed.append(gone.fd)
                }
            }
            return closed
        }
        for fd in left { close(fd) }
    }

    /// Serves the listener the previous binary handed over, with what it kept.
    static func adopt(controlSocket: String, listener: Int32, offers: [Kept], deposits: [Kept],
                      maxPayloadBytes: Int, expiring: @escaping @Sendable (Int64) -> Void) -> LinkHandoff {
        _ = cls_set_cloexec(listener, 1)
        let handoff = LinkHandoff(path: controlSocket + ".links", listener: listener, maxPayloadBytes: maxPayloadBytes,
                                  expiring: expiring)
        for (table, list) in [(handoff.offers, offers), (handoff.deposits, deposits)] {
            table.withLock { t in
                for k in list {
                    _ = cls_set_cloexec(k.fd, 1)
                    t[k.token] = Offer(fd: k.fd, tag: k.tag, until: k.until, connection: k.connection)
                }
            }
        }
        if let until = (offers + deposits).map(\.until).min() { expiring(until) }
        Threads.start(name: "link-handoff") { handoff.serve() }
        return handoff
    }

    /// Binds `<controlSocket>.links` and starts serving it; nil (logged by the caller) when it
    /// cannot: clients' calls then go through the supervisor.
    static func start(controlSocket: String, maxPayloadBytes: Int = Attachments.defaultMaxPayloadMB << 20,
                      expiring: @escaping @Sendable (Int64) -> Void) throws(SystemError) -> LinkHandoff {
        let path = controlSocket + ".links"
        unlink(path)
        let fd = socket(AF_UNIX, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        guard fd >= 0 else { throw SystemError(call: "socket", errno: errno, context: path) }
        var address = sockaddr_un()
        address.sun_family = sa_family_t(AF_UNIX)
        let bytes = Array(path.utf8)
        guard bytes.count < MemoryLayout.size(ofValue: address.sun_path) else {
            close(fd)
            throw SystemError(call: "bind", errno: ENAMETOOLONG, context: path)
        }
        withUnsafeMutableBytes(of: &address.sun_path) { out in
            for (i, b) in bytes.enumerated() { out[i] = b }
        }
        let old = umask(0o077)
        let bound = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, socklen_t(MemoryLayout<sockaddr_un>.size)) }
        }
        umask(old)
        guard bound == 0, listen(fd, 64) == 0 else {
            let e = errno
            close(fd)
            throw SystemError(call: "bind", errno: e, context: path)
        }
        chmod(path, 0o600)
        let handoff = LinkHandoff(path: path, listener: fd, maxPayloadBytes: maxPayloadBytes, expiring: expiring)
        Threads.start(name: "link-handoff") { handoff.serve() }
        return handoff
    }

    private init(path: String, listener: Int32, maxPayloadBytes: Int, expiring: @escaping @Sendable (Int64) -> Void) {
        self.path = path
        self.listener = listener
        self.maxPayloadBytes = maxPayloadBytes
        self.expiring = expiring
    }

    /// The memfd a client handed in with `token`, if it is `length` bytes long, now the caller's;
    /// nil when the token is unknown, expired, already used or of another length (closed then).
    func take(_ token: String, length: Int) -> Int32? {
        let now = ProcessControl.monotonicNanoseconds()
        guard let deposit = deposits.withLock({ $0.removeValue(forKey: token) }) else { return nil }
        guard deposit.until >= now, Int(deposit.tag) == length else {
            close(deposit.fd)
            return nil
        }
        return deposit.fd
    }

    /// Keeps `fd` (the client's end of link `link`, or an answer's memfd with `link` 0, now owned
    /// here) for the client `owner` that brings the returned token. Expired offers are closed on
    /// the way, and the owner's oldest past `offersPerClient`.
    func offer(_ fd: Int32, link: UInt64, to owner: ObjectIdentifier) -> String {
        let token = Self.token()
        let now = ProcessControl.monotonicNanoseconds()
        let until = now + Self.tokenLifetimeNanoseconds
        let expired = offers.withLock { offers -> [Int32] in
            var gone = offers.filter { $0.value.until < now }.map(\.key)
            let owned = offers.filter { $0.value.owner == owner && $0.value.until >= now }
            if owned.count >= Self.offersPerClient {
                gone += owned.sorted { $0.value.until < $1.value.until }.prefix(owned.count - Self.offersPerClient + 1).map(\.key)
            }
            let fds = gone.compactMap { offers.removeValue(forKey: $0)?.fd }
            offers[token] = Offer(fd: fd, tag: link, until: until, owner: owner)
            return fds
        }
        for fd in expired { close(fd) }
        expiring(until)
        return token
    }

    /// The client `owner` went away: what was offered to it and not picked up is closed now
    /// (its links' ends, so that their callees see them end; its answers' memfds, so that their
    /// memory is freed), not when the tokens expire.
    func withdraw(from owner: ObjectIdentifier) {
        let left = offers.withLock { offers -> [Int32] in
            let keys = offers.filter { $0.value.owner == owner }.map(\.key)
            return keys.compactMap { offers.removeValue(forKey: $0)?.fd }
        }
        for fd in left { close(fd) }
    }

    /// Closes the offers nobody picked up in time (a client that went away: an answer's memfd is
    /// not held longer than `tokenLifetime`). Cheap when there are none; the loop's deadline timer
    /// calls it. Returns the earliest end of those left (monotonic nanoseconds).
    func sweep() -> Int64? {
        let now = ProcessControl.monotonicNanoseconds()
        var next: Int64?
        for table in [offers, deposits] {
            let expired = table.withLock { offers -> [Int32] in
                guard !offers.isEmpty else { return [] }
                let gone = offers.filter { $0.value.until < now }
                for key in gone.keys { offers[key] = nil }
                if let left = offers.values.map(\.until).min() { next = min(next ?? left, left) }
                return gone.values.map(\.fd)
            }
            for fd in expired { close(fd) }
        }
        return next
    }

    /// Stops serving (the thread ends at its next accept), closes what was not picked up and
    /// removes the socket file.
    func stop() {
        guard !stopped.withLock({ s in defer { s = true }; return s }) else { return }
        Glibc.shutdown(listener, Int32(SHUT_RDWR))
        for table in [offers, deposits] {
            let left = table.withLock { offers in defer { offers = [:] }; return offers.values.map(\.fd) }
            for fd in left { close(fd) }
        }
        unlink(path)
    }

    /// Bytes handed in (`put`) that may wait for their calls at once: a quarter of the descriptors
    /// this process may open (the supervisor raised its limit for its plugins before), 64 at
    /// least, 65,536 at most. A client's calls beyond the 256 it has served at once wait unread
    /// with their tokens, so one busy client's hand-ins may be many.
    static let depositsLimit: Int = {
        var limit = rlimit()
        guard getrlimit(__rlimit_resource_t(RLIMIT_NOFILE.rawValue), &limit) == 0 else { return 256 }
        return max(64, min(65_536, Int(min(limit.rlim_cur, 1 << 20)) / 4))
    }()

    /// How long one client's request may take to arrive, all of it.
    static let requestMilliseconds: Int64 = 1000

    /// One client: its credentials, then its request: a token, answered with the descriptor and
    /// `{"link":n}`; or bytes handed in (`put`), answered with a token. Else an error.
    /// Answers `client`'s whole request, `body` (its frame without the length): a token, answered
    /// with the descriptor and `{"link":n}`; or bytes handed in (`put`, `received` its descriptors),
    /// answered with a token. Else an error. What is left of `received` is the caller's to close.
    func answer(_ client: Int32, body: ArraySlice<UInt8>, received: inout [Int32]) {
        guard let request = try? ProtocolJSON.decode(Request.self, from: Array(body)) else {
            return refuse(client, "expected {\"token\": \"...\"} or {\"put\": <length>} with a sealed memfd")
        }
        if let size = request.put {
            guard received.count == 1 else { return refuse(client, "a put brings exactly one descriptor, and \(received.count) came") }
            guard size <= UInt64(maxPayloadBytes) else { return refuse(client, "bytes of \(size) bytes, over the \(maxPayloadBytes) bytes (\(maxPayloadBytes >> 20) MiB) of maxPayloadMB") }
            // Each waits, a descriptor held, until a call names it or it expires: a client handing
            // in bytes it never sends (a loop, a leak) must not take every descriptor there is.
            let waiting = deposits.withLock { $0.count }
            guard waiting < Self.depositsLimit else {
                return refuse(client, "the supervisor holds \(waiting) handed-in bytes whose calls it has not taken yet (each kept \(Self.tokenLifetimeNanoseconds / 1_000_000_000) s, a descriptor each, at most a quarter of its descriptors); try again when those calls are answered",
                              code: .unavailable)
            }
            let rc = sp_bytes_check(received[0], size)
            guard rc == 0 else {
                return refuse(client, rc == -EBADF ? "the descriptor is not a memfd" : rc == -EPERM ? "the memfd is not sealed against writes, shrinking and growing" : "the memfd is not of the announced \(size) bytes")
            }
            let token = Self.token()
            let now = ProcessControl.monotonicNanoseconds()
            let until = now + Self.tokenLifetimeNanoseconds
            deposits.withLock { $0[token] = Offer(fd: received.removeFirst(), tag: size, until: until) }
            expiring(until)
            let answer = [UInt8].frame(body: Array(#"{"token":"\#(token)"}"#.utf8))
            _ = answer.withUnsafeBytes { send(client, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL | MSG_DONTWAIT)) }
            return
        }
        guard received.isEmpty, let wanted = request.token else { return refuse(client, "a token request brings no descriptor") }
        let now = ProcessControl.monotonicNanoseconds()
        guard let offer = offers.withLock({ $0.removeValue(forKey: wanted) }) else {
            return refuse(client, "unknown token (each is good once)")
        }
        defer { close(offer.fd) }
        guard offer.until >= now else { return refuse(client, "the token expired") }
        let answer = [UInt8].frame(body: Array(#"{"link":\#(offer.tag)}"#.utf8))
        _ = answer.withUnsafeBytes { cls_send_with_fd(client, offer.fd, $0.baseAddress, $0.count) }
    }

    /// `code`: `unavailable` for a refusal that a moment later may not be (a capacity), else the
    /// request's own fault (`badRequest`, what a client takes an answer without a code for).
    func refuse(_ client: Int32, _ why: String, code: ErrorCode = .badRequest) {
        guard let body = try? ProtocolJSON.encode(code == .badRequest ? ["error": why] : ["error": why, "code": code.rawValue]) else { return }
        let frame = [UInt8].frame(body: body)
        _ = frame.withUnsafeBytes { send(client, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL | MSG_DONTWAIT)) }
    }

    private struct Request: Decodable {
        var token: String?
        var put: UInt64?
    }

    /// 128 random bits, as hex.
    private static func token() -> String {
        var random = SystemRandomNumberGenerator()
        return [random.next(), random.next()].map { (word: UInt64) in
            let hex = String(word, radix: 16)
            return String(repeating: "0", count: 16 - hex.count) + hex
        }.joined()
    }
}
