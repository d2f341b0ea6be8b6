/// A request that waits for its plugin (SPEC §8): its own deadline, and whether anyone still wants
/// its answer.
package protocol WaitingRequest {
    var deadline: Instant { get }
    /// Nobody would read the answer (the client disconnected, the calling worker ended, the host
    /// gave up on it): it is dropped, and never sent to the plugin.
    var callerIsGone: Bool { get }
    /// The bytes it holds while it waits (its request as it came).
    var size: Int { get }
}

extension WaitingRequest {
    package var size: Int { 0 }
}

/// The requests that wait for one plugin to take them, oldest first, as values: each input says
/// which requests go where, and the driver does it. No request is lost: each
/// leaves by `release` (forwarded), `expire` (its deadline passed), `abandon` (the plugin will not
/// run), `withdraw` (its caller cancelled it) or because its caller is gone; a request whose caller
/// is gone is never forwarded.
package struct WaitQueue<Request: WaitingRequest> {
    package private(set) var requests: [Request] = []
    /// The bytes the requests hold.
    package private(set) var bytes = 0

    package init() {}

    package var isEmpty: Bool { requests.isEmpty }
    package var count: Int { requests.count }
    /// The one that has waited longest.
    package var first: Request? { requests.first }

    /// Adds `request` at the end; false (and nothing added) when `limit` already wait.
    package mutating func add(_ request: Request, limit: Int) -> Bool {
        guard requests.count < limit else { return false }
        requests.append(request)
        bytes += request.size
        return true
    }

    /// Whether a request of `size` bytes may wait with the others: within `bytesLimit` of them
    /// together, or the first (a plugin that is slow to start must not hold without bound what
    /// its callers send meanwhile).
    package func admits(size: Int, bytesLimit: Int) -> Bool {
        bytes == 0 || bytes + size <= bytesLimit
    }

    /// The plugin runs: everything still wanted, in the order it came.
    package mutating func release() -> [Request] {
        defer { requests = []; bytes = 0 }
        return requests.filter { !$0.callerIsGone }
    }

    /// Released requests that cannot go after all (the worker's socket took no more): back at the
    /// front, in their order, ahead of what came meanwhile, with their own deadlines.
    package mutating func putBack(_ released: some Collection<Request>) {
        requests.insert(contentsOf: released, at: 0)
        bytes += released.reduce(0) { $0 + $1.size }
    }

    /// The plugin will not run (it failed or stopped for good, it left, the supervisor stops):
    /// everything still wanted, to fail.
    package mutating func abandon() -> [Request] {
        release()
    }

    /// The requests `matching` says their caller withdrew (it cancelled them): they leave,
    /// unanswered and never forwarded.
    package mutating func withdraw(where matching: (Request) -> Bool) -> [Request] {
        var withdrawn: [Request] = []
        requests.removeAll { request in
            guard matching(request) else { return false }
            withdrawn.append(request)
            bytes -= request.size
            return true
        }
        return withdrawn
    }

    /// The requests whose deadline has passed, to fail with `timeout`; those whose caller is gone
    /// leave too, unanswered.
    package mutating func expire(now: Instant) -> [Request] {
        var expired: [Request] = []
        requests.removeAll { request in
            if request.callerIsGone {
                bytes -= request.size
                return true
            }
            guard request.deadline <= now else { return false }
            expired.append(request)
            bytes -= request.size
            return true
        }
        return expired
    }
}
