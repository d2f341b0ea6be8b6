#if canImport(Glibc)
import Glibc
#endif
import CLinuxSupport
import Logging
import NIOCore
import PluginProtocol
import SupervisorCore

/// A worker taken over in an upgrade in place keeps its taken page (SPEC §15), but the exec ended
/// this process's mapping of it and neither side kept this process a descriptor. A worker whose
/// `hello` said `takenPageKept` sends it again when asked (`takenPage`): its descriptor on the
/// payload channel, then a reply `true`. Until it is back, every call the worker holds counts as
/// possibly started (as for a worker without a page); from then on its marks count as before the
/// upgrade, its watermark going on from where the previous binary's stood.
extension Router {
    /// Asks `instance` for its page, if it was taken over with one (`CrashWitness.resume`): now, or
    /// once its turn comes (`PageAsks`: at most 32 at once, or the kernel refuses the descriptors
    /// of all but the first 257 workers asked).
    func askForTakenPage(_ instance: WorkerInstance) {
        guard instance.crash.awaitedPage != nil, instance.channel != nil, instance.payloadChannel != nil, !instance.phase.hasExited else {
            instance.crash.noPageAgain()
            return
        }
        let key = ObjectIdentifier(instance)
        guard pageAsks.want(key) else {
            pageAsksWaiting[key] = instance
            instance.waitsForItsPageAsk = true
            return
        }
        if !sendTakenPageAsk(instance) { takenPageAskEnded(key) }
    }

    /// Sends the ask; false when `instance` can no longer be asked (it ended, or its socket closed,
    /// while it waited for its turn): its turn is over.
    private func sendTakenPageAsk(_ instance: WorkerInstance) -> Bool {
        // What waited for the ask to go first goes after it (or now, if it cannot be asked).
        defer {
            if instance.waitsForItsPageAsk {
                instance.waitsForItsPageAsk = false
                if let record = table.record(servedBy: instance) { effects.post(.forwardWaiting(record)) }
            }
        }
        guard instance.crash.awaitedPage != nil, let channel = instance.channel, instance.payloadChannel != nil, !instance.phase.hasExited else {
            instance.crash.noPageAgain()
            return false
        }
        let deadline = Instant.now.adding(milliseconds: config.callTimeoutMs)
        table.watch(instance)
        let key = ObjectIdentifier(instance)
        let id = instance.pending.add(PendingRequest(origin: .local({ [self, weak instance] result in
            if let instance { takeTakenPage(instance, result) }
            takenPageAskEnded(key)
        }), deadline: deadline, what: .takenPage))
        deadlines.due(deadline.deadline)
        var frame = outbox.encoder(.takenPage, for: channel)
        frame.uint("id", id)
        outbox.write(frame.finish(), to: channel)
        return true
    }

    /// `instance`'s ask is over (or it ended before its turn): the next ones are asked. A worker
    /// that ended while it waited is passed over when its turn comes (`sendTakenPageAsk`).
    private func takenPageAskEnded(_ worker: ObjectIdentifier) {
        var ended = [worker]
        while let key = ended.popLast() {
            pageAsksWaiting[key] = nil
            for next in pageAsks.ended(key) {
                if let worker = pageAsksWaiting.removeValue(forKey: next), sendTakenPageAsk(worker) { continue }
                ended.append(next)
            }
        }
    }

    /// Its answer: `true`, the page is waiting on its payload channel; it must be a memfd of the
    /// page's size sealed against shrinking and growing, which is mapped read-only.
    private func takeTakenPage(_ instance: WorkerInstance, _ answer: Result<[UInt8]?, ErrorBody>) {
        var why: String
        switch answer {
        case .failure(let error): why = "no answer: \(error.message)"
        case .success(let result): why = result == Array("true".utf8) ? "" : "it had none to send"
        }
        if why.isEmpty, instance.payloadChannel == nil { why = "its payload channel is closed" }
        if why.isEmpty, let channel = instance.payloadChannel {
            var marker: UInt8 = 0
            var fd: Int32 = -1
            var count: Int32 = 0
            let n = cls_receive_fds(channel, &marker, 1, &fd, 1, &count)
            if n == 1, count == 1 {
                var page: UnsafePointer<UInt64>?
                let rc = cls_taken_page_map_received(fd, &page)
                close(fd)
                if rc == 0, let page { return instance.crash.pageReceived(page) }
                why = "what it sent is not its page (\(String(cString: strerror(-rc))))"
            } else {
                if fd >= 0, count > 0 { close(fd) }
                why = "its page did not come on its payload channel"
            }
        }
        instance.crash.noPageAgain()
        // A worker that ended meanwhile is decided without it anyway.
        guard !instance.phase.hasExited else { return }
        logger.warning("\(instance.identifier): the worker taken over in the upgrade did not give its taken page back (\(why)): every call it holds at a crash counts as started",
                       metadata: ["plugin": "\(instance.identifier)", "pid": "\(instance.pid)"])
    }
}
