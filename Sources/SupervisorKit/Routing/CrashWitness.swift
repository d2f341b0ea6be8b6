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
    /// The worker's taken page, made for it at its spawn (sealed, so the worker cannot shrink it
    /// under this read) and mapped read-only here; nil when none could be made, or for a worker
    /// resumed after an upgrade in place.
    private(set) var page: UnsafePointer<UInt64>?
    /// Its `hello` said it writes the page: only then does its mark count. Without it every call
    /// it got may have started.
    private var written = false
    /// The requests it held when its socket closed, decided at its exit (`Lifecycle.settleHeld`).
    var held: [(id: UInt64, entry: PendingRequest)] = []
    /// Its `hello` said it keeps a mark per link in the page (`linkMarks`): the words given to the
    /// links it serves (`PeerLinkOrder.markSlot`), and the links that ended with it, whose marks are
    /// read at its death (LinkMarks.swift).
    private(set) var keepsLinkMarks = false
    /// Its page was read a last time (`conclude`): the worker is dead and decided.
    private(set) var concluded = false
    var linkSlots = LinkMarkSlots()
    var endingLinks: [PeerLink] = []

    /// The page made for the worker at its spawn (`cls_taken_page_create`), owned from now on.
    mutating func give(_ page: UnsafePointer<UInt64>) {
        self.page = page
    }

    /// Its `hello` said `takenPage`: the page it was given counts from now on (a worker given none
    /// that says so anyway is believed about nothing). `kept`: it keeps the page's descriptor, to
    /// send to a binary that takes it over in an upgrade in place (`takenPageKept`).
    mutating func workerWritesPage(linkMarks: Bool, kept: Bool = false) {
        written = page != nil
        keepsLinkMarks = written && linkMarks
        pageKept = written && kept
    }

    /// It keeps its page's descriptor (`hello`'s `takenPageKept`).
    private(set) var pageKept = false

    /// What an upgrade's snapshot keeps of it: the watermark its word is trusted up to, and whether
    /// it keeps link marks; nil when the next binary could not read its page again (none written,
    /// none kept, or its word is not trusted any more).
    var handedOver: (taken: UInt64, linkMarks: Bool)? {
        guard written, pageKept, let taken = watermark.taken else { return nil }
        return (taken, keepsLinkMarks)
    }

    /// Taken over in an upgrade in place (`handedOver`, as the previous binary wrote it): its word
    /// counts again once the worker has sent its page (`pageReceived`); until then, as for any
    /// worker without a page, every call it holds may have started.
    mutating func resume(highestSent: UInt64, taken: UInt64, linkMarks: Bool) {
        watermark = TakenWatermark(resumedAt: highestSent, taken: taken)
        awaitedPage = linkMarks ? .withLinkMarks : .plain
    }

    /// A page asked for after an upgrade, not received yet.
    enum AwaitedPage { case plain, withLinkMarks }
    private(set) var awaitedPage: AwaitedPage?

    /// The page it sent again (checked and mapped by the caller): its marks count from now on.
    mutating func pageReceived(_ page: UnsafePointer<UInt64>) {
        guard let awaited = awaitedPage, self.page == nil, !concluded else { return cls_taken_page_unmap(page) }
        self.page = page
        awaitedPage = nil
        written = true
        pageKept = true
        keepsLinkMarks = awaited == .withLinkMarks
    }

    /// No page came (the worker had none to send, or its answer failed): it stays without one.
    mutating func noPageAgain() {
        awaitedPage = nil
    }

    /// What the worker says of a link's calls: the highest id on it handed to its plugin (read at
    /// its death, before `conclude`); nil when it keeps no marks.
    func linkMark(_ slot: Int) -> UInt64? {
        guard keepsLinkMarks, let page, slot > 0, slot < LinkMarkSlots.words else { return nil }
        return cls_taken_load(page + slot)
    }

    /// Reads the page: what the worker says it has taken so far. A lie (the mark went back) is
    /// returned once, for the log; from then on only the kernel's word would count.
    @inline(__always)
    mutating func observe() -> TakenWatermark.Lie? {
        guard written, let page else { return nil }
        if case .lie(let lie) = watermark.reported(cls_taken_load(page)) { return lie }
        return nil
    }

    /// The last word before deciding (after the worker's death), and the page let go: the
    /// watermark to decide with (with no page it writes, one that says every call it got may have
    /// started), and a lie seen in that last read.
    mutating func conclude() -> (witness: TakenWatermark, lie: TakenWatermark.Lie?) {
        let lie = observe()
        concluded = true
        if let page {
            cls_taken_page_unmap(page)
            self.page = nil
        }
        if written { return (watermark, lie) }
        var blind = watermark
        if blind.isTrusted { blind.reported(blind.highestSent) }
        return (blind, nil)
    }
}
