#if canImport(Glibc)
import Glibc
#endif
import PluginProtocol
import Testing

/// The one check of a message's attachments between our processes (`Attachments.announced` and
/// `placing`), which the supervisor (a worker's message), a worker (a peer's over a link, the
/// supervisor's on its payload channel) all use.
@Suite struct AttachmentCheckTests {
    static func message(_ json: String, tail: [UInt8]? = nil) -> (Envelope, [UInt8]) {
        let bytes = Array(json.utf8) + (tail.map { [0] + $0 } ?? [])
        let env = bytes.withUnsafeBytes { try! Envelope.parse($0) }
        return (env, bytes)
    }

    static func check(_ json: String, tail: [UInt8]? = nil) -> Result<[PluginProtocol.Attachment]?, Attachments.Problem> {
        let (env, bytes) = message(json, tail: tail)
        return bytes.withUnsafeBytes { raw in Result { () throws(Attachments.Problem) in try Attachments.announced(in: env, raw) } }
    }

    @Test("announced: none, inline bytes exactly as announced, descriptors; refused: data without attachments, other inline counts, tokens")
    func announced() throws {
        #expect(try Self.check(#"{"type":"reply","id":1,"result":1}"#).get() == nil)
        let inline = try #require(try Self.check(#"{"type":"reply","id":1,"result":{"$bytes":0},"attachments":[{"length":3}]}"#, tail: [1, 2, 3]).get())
        #expect(inline == [PluginProtocol.Attachment(length: 3, place: .inline)])
        let fd = try #require(try Self.check(#"{"type":"reply","id":1,"result":{"$bytes":0},"attachments":[{"length":70000,"fd":true}]}"#).get())
        #expect(fd == [PluginProtocol.Attachment(length: 70000, place: .descriptor(-1))])
        for (json, tail, why) in [
            (#"{"type":"reply","id":1,"result":1}"#, [UInt8]([9]), "data after the JSON object"),
            (#"{"type":"reply","id":1,"attachments":[{"length":5}]}"#, [1, 2], "announce 5 inline bytes and 2 came"),
            (#"{"type":"reply","id":1,"attachments":[{"length":5,"token":"t"}]}"#, nil, "an attachment with a token"),
        ] {
            guard case .failure(let problem) = Self.check(json, tail: tail) else {
                Issue.record("\(json) was taken")
                continue
            }
            #expect(problem.description.contains(why), "\(problem)")
        }
    }

    @Test("placing: each descriptor checked and put in its place; too few or too many, or one that is not a sealed memfd of its length, named")
    func placing() throws {
        let list = [PluginProtocol.Attachment(length: 3, place: .inline), .init(length: 100, place: .descriptor(-1)), .init(length: 200, place: .descriptor(-1))]
        let ok = try Attachments.placing([7, 8], in: list) { _, _ in 0 }
        #expect(ok.map(\.place) == [.inline, .descriptor(7), .descriptor(8)])
        #expect(throws: Attachments.Problem("2 descriptors announced, 1 came")) { try Attachments.placing([7], in: list) { _, _ in 0 } }
        for (rc, why) in [(-EBADF, "not a memfd: it is"), (-EPERM, "not sealed"), (-EINVAL, "not of the announced 200 bytes")] {
            do {
                _ = try Attachments.placing([7, 8], in: list) { fd, _ in fd == 8 ? Int32(rc) : 0 }
                Issue.record("rc \(rc) was taken")
            } catch {
                #expect(error.description.contains("attachment 2 (the 2nd descriptor that came) is \(why)"), "\(error)")
            }
        }
    }

    @Test("a descriptor that is not a memfd is named by what it is")
    func kinds() throws {
        var fds: [Int32] = [0, 0]
        #expect(pipe(&fds) == 0)
        defer { close(fds[0]); close(fds[1]) }
        #expect(Attachments.kind(of: fds[0]) == "a pipe")
        #expect(Attachments.kind(of: -1) == "not an open descriptor")
    }
}
