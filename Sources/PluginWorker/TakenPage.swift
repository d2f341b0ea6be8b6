import CLinuxSupport
import PluginProtocol
#if canImport(Glibc)
import Glibc
#endif

/// The worker's side of SPEC §15's watermark: a page it shares with the supervisor, whose first
/// 8 bytes say the highest id of a request from the supervisor (`call`, `open`, `event`) that this
/// worker has handed to its plugin. The I/O thread advances it just before each hand-over, so that
/// when the worker dies the supervisor knows which of the calls it held the plugin never saw: those
/// above the mark, in the socket or not yet read, go to the next worker.
///
/// Costs a store per request and no message: the supervisor reads the page when it reads this
/// worker's frames and once more after its death. The supervisor made the page (a memfd sealed
/// against shrinking) and gave it at the spawn (`WorkerSpec.takenPageFD`), and trusts the mark only
/// to go up (TakenWatermark).
struct TakenPage: Sendable {
    /// The page's address (one thread, the I/O loop, writes through it; it never changes).
    private let address: UInt
    /// Its descriptor, kept open (close-on-exec, through the sandbox: `SandboxPlan.takenPageFD`)
    /// for a supervisor that takes this worker over in an upgrade in place and asks for the page
    /// again (`takenPage`, WorkerHost.sendTakenPage).
    let descriptor: Int32

    /// The page given at the spawn, mapped. Nil when it cannot be mapped (its descriptor closed):
    /// `hello` then says nothing of it, and the supervisor treats every call the worker got as
    /// possibly started.
    init?(adopting descriptor: Int32) {
        var page: UnsafeMutablePointer<UInt64>?
        let rc = cls_taken_page_adopt(descriptor, &page)
        guard rc == 0, let page else {
            close(descriptor)
            return nil
        }
        _ = fcntl(descriptor, F_SETFD, FD_CLOEXEC)
        self.descriptor = descriptor
        address = UInt(bitPattern: page)
    }

    /// `body`, a frame from the supervisor, is about to be handed to the plugin: a request's id
    /// becomes the mark.
    @inline(__always)
    func handingOver(_ body: UnsafeRawBufferPointer) {
        if let id = Self.requestID(body), let page = UnsafeMutablePointer<UInt64>(bitPattern: address) { cls_taken_store(page, id) }
    }

    /// A call that came over a link is about to be handed to the plugin: `slot`, the link's word
    /// (`PeerLinkOrder.markSlot`), says the highest such id. Only the links thread writes link
    /// words; ids on a link need not arrive in order (callers' tasks write concurrently), so the
    /// word keeps the highest: a call below it that is not handed over yet counts as started (the
    /// safe side: it is not sent again unless idempotent).
    @inline(__always)
    func handingOver(linkCall id: UInt64, slot: Int) {
        guard slot > 0, slot < Self.words, let page = UnsafeMutablePointer<UInt64>(bitPattern: address) else { return }
        let word = page + slot
        if id > cls_taken_load(word) { cls_taken_store(word, id) }
    }

    /// A link that names `slot` arrived: its word starts from nothing (it may hold the mark of an
    /// earlier link given the same word).
    func clear(slot: Int) {
        guard slot > 0, slot < Self.words, let page = UnsafeMutablePointer<UInt64>(bitPattern: address) else { return }
        cls_taken_store(page + slot, 0)
    }

    /// Words in the page: the first is the supervisor's requests', the others links' (`markSlot`).
    static let words = 512

    /// The id of a request the supervisor wrote (`{"type":"call","id":N`, likewise `open` and
    /// `event`: FrameEncoder writes the kind and then the id first), nil for any other frame.
    static func requestID(_ body: UnsafeRawBufferPointer) -> UInt64? {
        guard let base = body.baseAddress, body.count > 17, body[9] == UInt8(ascii: "c") || body[9] == UInt8(ascii: "o")
                || body[9] == UInt8(ascii: "e") else { return nil }
        for prefix in requestPrefixes where body.count > prefix.utf8CodeUnitCount
            && memcmp(base, prefix.utf8Start, prefix.utf8CodeUnitCount) == 0 {
            var value: UInt64 = 0
            var index = prefix.utf8CodeUnitCount
            // At most 19 digits: no UInt64 overflow.
            while index < body.count, index < prefix.utf8CodeUnitCount + 19 {
                let digit = body[index] &- UInt8(ascii: "0")
                guard digit < 10 else { break }
                value = value * 10 + UInt64(digit)
                index += 1
            }
            return index > prefix.utf8CodeUnitCount ? value : nil
        }
        return nil
    }

    private static let requestPrefixes: [StaticString] = [#"{"type":"call","id":"#, #"{"type":"open","id":"#, #"{"type":"event","id":"#]
}
