import LinuxSupport
import PluginProtocol

/// One program's direct links, by plugin (a `SupervisorClient`'s, or an embedded `PluginHost`'s):
/// which are there, which are being asked for, and which were refused lately (not asked again
/// before `retryNanoseconds` have passed). Thread-safe; the links themselves are `DirectLink`s.
package final class DirectLinks: Sendable {
    private let slots = Guarded(Slots())
    private let retryNanoseconds: Int64

    private struct Slots {
        var byPlugin: [String: Slot] = [:]
        var closed = false
    }

    private enum Slot {
        case asking
        case ready(DirectLink)
        case refused(until: Int64)
    }

    package init(retryAfterNanoseconds: Int64) {
        retryNanoseconds = retryAfterNanoseconds
    }

    /// The plugins called over a link now.
    package var plugins: [String] {
        slots.withLock { s in s.byPlugin.compactMap { if case .ready = $0.value { $0.key } else { nil } }.sorted() }
    }

    package func link(to target: String) -> DirectLink? {
        slots.withLock { s in if case .ready(let link)? = s.byPlugin[target] { link } else { nil } }
    }

    /// Whether to ask for a link to `target` now: none is there or asked for, and none was refused
    /// lately. True marks it as asked for.
    package func shouldAsk(for target: String) -> Bool {
        let now = ProcessControl.monotonicNanoseconds()
        return slots.withLock { s -> Bool in
            guard !s.closed else { return false }
            switch s.byPlugin[target] {
            case .asking?, .ready?: return false
            case .refused(let until)? where until > now: return false
            default:
                s.byPlugin[target] = .asking
                return true
            }
        }
    }

    /// The link asked for: kept, or closed when it is no longer wanted (the program closed).
    package func granted(_ link: DirectLink) {
        let kept = slots.withLock { s -> Bool in
            guard !s.closed, case .asking? = s.byPlugin[link.target] else { return false }
            s.byPlugin[link.target] = .ready(link)
            return true
        }
        if !kept { link.close() }
    }

    /// No link to `target` could be had: not asked again for a while.
    package func refused(_ target: String) {
        let until = ProcessControl.monotonicNanoseconds() + retryNanoseconds
        slots.withLock { s in
            if case .asking? = s.byPlugin[target] { s.byPlugin[target] = .refused(until: until) }
        }
    }

    /// `link` ended by itself: forgotten, so the next call through the supervisor asks again.
    package func ended(_ link: DirectLink) {
        slots.withLock { s in
            if case .ready(let current)? = s.byPlugin[link.target], current === link { s.byPlugin[link.target] = nil }
        }
    }

    /// The supervisor takes link `number` back: no call goes over it from now on, and `answer` is
    /// called once its calls are settled (at once when it is not one of these).
    package func unlink(_ number: UInt64, answer: @escaping @Sendable () -> Void) {
        let link = slots.withLock { s -> DirectLink? in
            for (target, slot) in s.byPlugin {
                if case .ready(let l) = slot, l.number == number {
                    s.byPlugin[target] = nil
                    return l
                }
            }
            return nil
        }
        if let link { link.unlink(answer) } else { answer() }
    }

    /// Closes every link; none is kept from now on.
    package func closeAll() {
        let all = slots.withLock { s -> [DirectLink] in
            s.closed = true
            defer { s.byPlugin = [:] }
            return s.byPlugin.values.compactMap { if case .ready(let l) = $0 { l } else { nil } }
        }
        for link in all { link.close() }
    }
}

/// How a call that got no answer over a direct link goes through the supervisor: with what is
/// left of its time, and, when its link ended with the call in flight, where it was (`afterLink`).
package struct ThroughSupervisor: Sendable {
    package var timeout: Duration?
    package var afterLink: AfterLink?

    package init(timeout: Duration?) {
        self.timeout = timeout
    }
}

extension DirectLinks {
    /// A call over the link to `target`, if there is one: its answer; nil when it goes through the
    /// supervisor instead, as `route` says (no link, the link took no more calls, or it ended with
    /// the call in flight: SPEC §15).
    package func call(_ target: String, _ method: String, params: [UInt8]?, route: inout ThroughSupervisor) async throws -> [UInt8]? {
        guard let link = link(to: target) else { return nil }
        switch try await link.call(method: method, params: params, timeout: route.timeout) {
        case .answered(let answer): return answer
        case .notTaken: return nil
        case .ended(let after, let remaining):
            route = ThroughSupervisor(timeout: remaining)
            route.afterLink = after
            return nil
        }
    }
}
