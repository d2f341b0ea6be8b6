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

    @Test("the supervisor's page is sealed and read-only to it; the worker maps it writable and what it stores is read; a descriptor that is no page is refused")
    func pageChecks() throws {
        var readable: UnsafePointer<UInt64>?
        let fd = cls_taken_page_create(&readable)
        #expect(fd >= 0)
        defer { close(fd) }
        let reader = try #require(readable)
        var writable: UnsafeMutablePointer<UInt64>?
        #expect(cls_taken_page_adopt(fd, &writable) == 0)
        let page = try #require(writable)
        cls_taken_store(page, 42)
        #expect(cls_taken_load(reader) == 42)
        #expect(ftruncate(fd, 0) != 0, "a sealed page shrank")
        #expect(ftruncate(fd, 8192) != 0, "a sealed page grew")
        cls_taken_page_unmap(reader)
        cls_taken_page_unmap(page)

        // What a worker could be handed by mistake: too short, or no file at all.
        let short = sp_bytes_writable(8)
        #expect(short >= 0)
        defer { close(short) }
        #expect(cls_taken_page_adopt(short, &writable) == -EINVAL)
        let pipeEnds = UnsafeMutablePointer<Int32>.allocate(capacity: 2)
        defer { pipeEnds.deallocate() }
        #expect(pipe(pipeEnds) == 0)
        #expect(cls_taken_page_adopt(pipeEnds[0], &writable) == -EBADF)
        close(pipeEnds[0])
        close(pipeEnds[1])
    }

    @Test("a page sent again by a worker after an upgrade is mapped only when it is a page: the size of one, sealed against shrinking and growing; else refused, saying why")
    func pageSentAgain() throws {
        var original: UnsafePointer<UInt64>?
        let fd = cls_taken_page_create(&original)
        #expect(fd >= 0)
        defer { close(fd) }
        var writable: UnsafeMutablePointer<UInt64>?
        #expect(cls_taken_page_adopt(fd, &writable) == 0)
        cls_taken_store(try #require(writable), 99)
        var again: UnsafePointer<UInt64>?
        #expect(cls_taken_page_map_received(fd, &again) == 0)
        #expect(cls_taken_load(try #require(again)) == 99, "the same page, read through the new mapping")
        cls_taken_page_unmap(again)
        cls_taken_page_unmap(original)
        cls_taken_page_unmap(writable)

        // Not sealed: it could be shrunk under the reader's mapping.
        let unsealed = memfd_create("not-a-page", UInt32(MFD_CLOEXEC))
        defer { close(unsealed) }
        #expect(ftruncate(unsealed, 4096) == 0)
        #expect(cls_taken_page_map_received(unsealed, &again) == -EPERM)
        // Another size, sealed.
        let other = memfd_create("other-size", UInt32(MFD_CLOEXEC | MFD_ALLOW_SEALING))
        defer { close(other) }
        #expect(ftruncate(other, 8192) == 0 && fcntl(other, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW) == 0)
        #expect(cls_taken_page_map_received(other, &again) == -EINVAL)
        // No file.
        let pipeEnds = UnsafeMutablePointer<Int32>.allocate(capacity: 2)
        defer { pipeEnds.deallocate() }
        #expect(pipe(pipeEnds) == 0)
        #expect(cls_taken_page_map_received(pipeEnds[0], &again) == -EINVAL)
        close(pipeEnds[0])
        close(pipeEnds[1])
    }
}
