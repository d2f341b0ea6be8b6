/// Which workers taken over in an upgrade in place are asked for their taken page now (SPEC §15).
///
/// Each asked worker answers with its page's descriptor on its payload channel, and a descriptor
/// in flight over a Unix socket counts against its sender's user until it is received: the kernel
/// refuses a send (`ETOOMANYREFS`) once that user has more in flight than the sender's open-files
/// limit, 256 in a worker. Every worker runs as one user, and the supervisor reads a page only as
/// each answer comes, so with all of them asked at once every worker after the 257th had none to
/// send. At most `limit` are asked at once; the others wait their turn, first come first asked,
/// and each answer (a page, none, no answer by the deadline, its worker's end) lets the next one
/// be asked. `Worker` is the driver's name for a worker (SupervisorKit: its `ObjectIdentifier`).
package struct PageAsks<Worker: Hashable> {
    /// Asks at once, at most: well under the 256 descriptors a worker may have in flight, and
    /// enough that a thousand workers are asked in a few round trips each.
    package static var defaultLimit: Int { 32 }

    package let limit: Int
    /// Asked, not answered yet.
    package private(set) var asked: Set<Worker> = []
    /// Waiting for their turn, oldest first, from `head` on.
    private var queue: [Worker] = []
    private var head = 0
    /// In `queue` and still to be asked (one that ended meanwhile is dropped from here).
    private var queued: Set<Worker> = []

    package init(limit: Int = PageAsks.defaultLimit) {
        precondition(limit > 0, "at least one worker is asked at a time")
        self.limit = limit
    }

    /// Workers waiting for their turn.
    package var waiting: Int { queued.count }

    /// `worker` has a page to send back: true, ask it now; false, it waits for its turn (`ended`
    /// hands it back then). Wanting twice changes nothing (and says false).
    package mutating func want(_ worker: Worker) -> Bool {
        guard !asked.contains(worker), !queued.contains(worker) else { return false }
        if asked.count < limit {
            asked.insert(worker)
            return true
        }
        queue.append(worker)
        queued.insert(worker)
        return false
    }

    /// `worker`'s ask is over (answered, not answered by its deadline) or the worker has ended,
    /// asked or still waiting: the workers to ask now, each counted as asked.
    package mutating func ended(_ worker: Worker) -> [Worker] {
        if queued.remove(worker) != nil { return [] }
        guard asked.remove(worker) != nil else { return [] }
        var next: [Worker] = []
        while asked.count < limit, head < queue.count {
            let candidate = queue[head]
            head += 1
            guard queued.remove(candidate) != nil else { continue }
            asked.insert(candidate)
            next.append(candidate)
        }
        if head == queue.count {
            queue.removeAll(keepingCapacity: true)
            head = 0
        }
        return next
    }
}
