import CLinuxSupport
import NIOCore
import PluginProtocol
import SupervisorCore
#if canImport(Glibc)
import Glibc
#endif

/// What the supervisor keeps of one worker to know, when it dies, which of the calls it held its
/// plugin never started (SPEC §15, SupervisorCore/Replay/CrashReplay.swift): the ids sent, the
/// worker's taken page, and the requests it held when its socket closed. Owned by the event loop,
/// like the worker it belongs to.
struct CrashWitness {
    /// The ids sent to the worker and what it reported taking.
    var watermark = TakenWatermark()
    /// The worker's taken page, mapped read-only (checked sealed against shrinking first); nil when it
    /// sent none (an older worker, or one resumed after an upgrade in place): then every call it got
    /// may have started.
    private(set) var page: UnsafePointer<UInt64>?
    /// It sent a page (mapped now, or let go by `conclude`).
    private var hadPage = false
    /// The requests it held when its socket closed, decided at its exit (`Lifecycle.settleHeld`).
    var held: [(id: UInt64, entry: PendingRequest)] = []

    /// Reads the page: what the worker says it has taken so far. A lie (the mark went back) is
    /// returned once, for the log; from then on only the kernel's word would count.
    @inline(__always)
    mutating func observe() -> TakenWatermark.Lie? {
        guard let page else { return nil }
        if case .lie(let lie) = watermark.reported(cls_taken_load(page)) { return lie }
        return nil
    }

    /// Takes the page the worker sent on its payload channel just before `hello`: the reason when
    /// it did not come or is not one (a protocol violation), nil when it is mapped.
    mutating func receivePage(on payloadChannel: Int32?) -> String? {
        guard let payloadChannel else { return "hello announces a taken page, and it has no payload channel" }
        var marker: UInt8 = 0
        var fds = [Int32](repeating: -1, count: 2)
        var count: Int32 = 0
        let n = fds.withUnsafeMutableBufferPointer { cls_receive_fds(payloadChannel, &marker, 1, $0.baseAddress, 2, &count) }
        let received = Array(fds.prefix(Int(count)))
        defer { for fd in received { close(fd) } }
        guard n == 1, marker == UInt8(ascii: "T"), received.count == 1 else {
            return "hello announces a taken page, and its payload channel holds \(n == 1 ? "\(received.count) descriptors" : "none")"
        }
        var mapped: UnsafePointer<UInt64>?
        let rc = cls_taken_page_map(received[0], &mapped)
        guard rc == 0, let mapped else {
            let why = rc == -EPERM ? "not sealed against shrinking" : rc == -EINVAL ? "shorter than a page" : String(cString: strerror(-rc))
            return "its taken page is not a sealed memfd of a page: \(why)"
        }
        page = mapped
        hadPage = true
        return nil
    }

    /// The last word before deciding (after the worker's death), and the page let go: the
    /// watermark to decide with (with no page, one that says every call it got may have started),
    /// and a lie seen in that last read.
    mutating func conclude() -> (witness: TakenWatermark, lie: TakenWatermark.Lie?) {
        guard let page else {
            if hadPage { return (watermark, nil) }
            var blind = watermark
            if blind.isTrusted { blind.reported(blind.highestSent) }
            return (blind, nil)
        }
        let lie = observe()
        cls_taken_page_unmap(page)
        self.page = nil
        return (watermark, lie)
    }
}
