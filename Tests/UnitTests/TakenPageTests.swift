import CLinuxSupport
import CPluginABI
import Foundation
import PluginProtocol
@testable import PluginWorker
import Testing
#if canImport(Glibc)
import Glibc
#endif

/// The worker's taken page (SPEC §15): which frames advance the mark, and the page's checks on
/// the supervisor's side.
@Suite struct TakenPageTests {
    static func id(_ text: String) -> UInt64? {
        Array(text.utf8).withUnsafeBytes { TakenPage.requestID($0) }
    }

    @Test("the ids of calls, opens and events the supervisor writes advance the mark; nothing else does")
    func requestIDs() {
        var call = FrameEncoder(kind: .call, into: [UInt8]())
        call.uint("id", 4711)
        call.string("target", "a.b")
        let frame = call.finish()
        #expect(frame.withUnsafeBytes { TakenPage.requestID(UnsafeRawBufferPointer(rebasing: $0[Frame.headerSize...])) } == 4711)
        #expect(Self.id(#"{"type":"open","id":12,"uri":"plugin://a/b"}"#) == 12)
        #expect(Self.id(#"{"type":"event","id":3,"name":"startup"}"#) == 3)
        #expect(Self.id(#"{"type":"cancel","id":5}"#) == nil)
        #expect(Self.id(#"{"type":"reply","id":5,"result":1}"#) == nil)
        #expect(Self.id(#"{"type":"ping","id":5}"#) == nil)
        #expect(Self.id(#"{"type":"chunk","id":5}"#) == nil)
        #expect(Self.id(#"{"type":"call","id":x}"#) == nil)
        #expect(Self.id(#"{"type":"call","id":"#) == nil)
        #expect(Self.id(#"{"type":"call","id":18446744073709551615}"#) != 18446744073709551615, "20 digits are not read whole")
        #expect(Self.id("") == nil)
    }

    @Test("a page is made sealed, written by its maker, read through a second mapping; a memfd that can shrink, or is too short, is refused")
    func pageChecks() throws {
        var writable: UnsafeMutablePointer<UInt64>?
        let fd = cls_taken_page_create(&writable)
        #expect(fd >= 0)
        defer { close(fd) }
        let page = try #require(writable)
        var readable: UnsafePointer<UInt64>?
        #expect(cls_taken_page_map(fd, &readable) == 0)
        let reader = try #require(readable)
        cls_taken_store(page, 42)
        #expect(cls_taken_load(reader) == 42)
        #expect(ftruncate(fd, 0) != 0, "a sealed page shrank")
        cls_taken_page_unmap(reader)
        cls_taken_page_unmap(page)

        // A memfd of a page with no seal: it could shrink under the mapping.
        let loose = sp_bytes_writable(4096)
        #expect(loose >= 0)
        defer { close(loose) }
        #expect(cls_taken_page_map(loose, &readable) == -EPERM)
        let short = sp_bytes_writable(8)
        #expect(short >= 0)
        defer { close(short) }
        #expect(sp_bytes_seal(short) == 0)
        #expect(cls_taken_page_map(short, &readable) == -EINVAL)
        let pipeEnds = UnsafeMutablePointer<Int32>.allocate(capacity: 2)
        defer { pipeEnds.deallocate() }
        #expect(pipe(pipeEnds) == 0)
        #expect(cls_taken_page_map(pipeEnds[0], &readable) == -EBADF)
        close(pipeEnds[0])
        close(pipeEnds[1])
    }
}
