import Foundation
import NIOCore
import PluginProtocol
import Testing
@testable import SupervisorKit

/// The rules of one forwarding hop (`CallHop`), as the supervisor and a callee's worker apply them.
@Suite struct CallHopTests {
    static let parent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"

    @Test func theTimeoutIsTheCallsOwnAtMostADayElseTheCallees() {
        #expect(CallHop.timeoutMs(requested: nil, otherwise: 7_000) == 7_000)
        #expect(CallHop.timeoutMs(requested: 0, otherwise: 7_000) == 7_000)
        #expect(CallHop.timeoutMs(requested: 250, otherwise: 7_000) == 250)
        #expect(CallHop.timeoutMs(requested: UInt64(CallTimeouts.longestMs), otherwise: 7_000) == CallTimeouts.longestMs)
        #expect(CallHop.timeoutMs(requested: UInt64.max, otherwise: 7_000) == CallTimeouts.longestMs)
    }

    /// Forwards `request` with a fresh hop into an array; the frame and the trace it wrote.
    static func forward(_ kind: MessageKind, _ request: String, id: UInt64, from caller: String?) throws -> ([UInt8], CallHop.Trace) {
        var hop = CallHop()
        let bytes = Array(request.utf8)
        return try bytes.withUnsafeBytes { raw in
            let env = try Envelope.parse(raw)
            let (frame, trace) = hop.forward(kind, id: id, from: caller, env, in: raw, into: [UInt8]())
            return (frame, trace)
        }
    }

    @Test func aCallIsWrittenByteForByte() throws {
        let request = #"{"type":"call","id":7,"target":"com.b","method":"m\u00e9","params":{"a":[1, 2.5e3,"x\"y"]},"from":"forged","timeoutMs":5,"traceparent":"\#(Self.parent)"}"#
        let (frame, trace) = try Self.forward(.call, request, id: 42, from: "com.\"a\"")
        let body = String(decoding: frame[Frame.headerSize...], as: UTF8.self)
        let expected = #"{"type":"call","id":42,"target":"com.b","method":"m\u00e9","params":{"a":[1, 2.5e3,"x\"y"]},"from":"com.\"a\"","traceparent":"\#(trace.header)"}"#
        #expect(body == expected)
        #expect(Array(frame[0..<4]) == [0, 0, UInt8(expected.utf8.count >> 8), UInt8(expected.utf8.count & 0xFF)])
        #expect(frame.count <= CallHop.frameCapacity(forwarding: request.utf8.count, from: "com.\"a\""))
    }

    @Test func anOpenFromTheCLIHasItsURIAndNoFrom() throws {
        let (frame, trace) = try Self.forward(.open, #"{"type":"open","id":1,"uri":"plugin://com.b/x?y=1"}"#, id: 3, from: nil)
        #expect(String(decoding: frame[Frame.headerSize...], as: UTF8.self)
            == #"{"type":"open","id":3,"uri":"plugin://com.b/x?y=1","traceparent":"\#(trace.header)"}"#)
        #expect(!trace.continued)
    }

    @Test func theSupervisorsBufferGetsTheSameBytes() throws {
        let request = Array(#"{"type":"call","id":7,"target":"com.b","method":"m","params":[1]}"#.utf8)
        var a = CallHop(), b = CallHop()
        let (array, buffer) = try request.withUnsafeBytes { raw in
            let env = try Envelope.parse(raw)
            let first = a.forward(.call, id: 9, from: "com.a", env, in: raw, into: [UInt8]())
            let second = b.forward(.call, id: 9, from: "com.a", env, in: raw, into: ByteBuffer())
            return (String(decoding: first.frame, as: UTF8.self).replacingOccurrences(of: first.trace.header, with: "T"),
                    String(buffer: second.frame).replacingOccurrences(of: second.trace.header, with: "T"))
        }
        #expect(array == buffer)
    }

    @Test func aHopContinuesTheCallersTraceWithANewSpan() throws {
        var hop = CallHop()
        let trace = JSONEscaping.quoted(Self.parent).withUnsafeBytes { hop.nextTrace(parent: $0) }
        #expect(trace.continued)
        #expect(trace.header.hasPrefix("00-4bf92f3577b34da6a3ce929d0e0e4736-"))
        #expect(trace.header.hasSuffix("-01"))
        #expect(!trace.header.contains("00f067aa0ba902b7"))
    }

    @Test(arguments: [nil, "", "00-00000000000000000000000000000000-00f067aa0ba902b7-01", "not one"])
    func withoutAValidParentAHopStartsANewTrace(_ given: String?) {
        var hop = CallHop()
        let quoted = given.map(JSONEscaping.quoted)
        let first = quoted.map { q in q.withUnsafeBytes { hop.nextTrace(parent: $0) } } ?? hop.nextTrace(parent: nil)
        let second = hop.nextTrace(parent: nil)
        #expect(!first.continued)
        #expect(first.header.count == 55 && first.header.hasPrefix("00-") && first.header.hasSuffix("-00"))
        #expect(first.header.dropLast(3).suffix(16) != second.header.dropLast(3).suffix(16))
        #expect(first.header.prefix(35) != second.header.prefix(35))
        // What a hop writes, the next hop reads as its parent.
        let next = JSONEscaping.quoted(first.header).withUnsafeBytes { hop.nextTrace(parent: $0) }
        #expect(next.continued && next.header.prefix(35) == first.header.prefix(35))
    }

    @Test func aDurationFallsInTheFirstBucketWhoseBoundItDoesNotExceed() {
        let bounds = CallHop.bucketBounds
        #expect(CallHop.bucketCount == bounds.count + 1)
        #expect(CallHop.bucket(ofNanoseconds: 0) == 0)
        for (i, bound) in bounds.enumerated() {
            #expect(CallHop.bucket(ofNanoseconds: bound) == i, "at \(bound)")
            #expect(CallHop.bucket(ofNanoseconds: bound + 1) == i + 1, "past \(bound)")
        }
        #expect(CallHop.bucket(ofNanoseconds: .max) == bounds.count)
    }

    @Test func theOutcomesAreNamedAsPrometheusLabelsThem() {
        #expect(CallHop.Outcome.allCases.map(\.label) == ["ok", "error", "timeout", "unavailable", "denied"])
        #expect(CallHop.Outcome.allCases.map(\.index) == Array(0..<5))
    }

    static func tally() -> CallHop.Tally {
        var tally = CallHop.Tally()
        tally.record(.ok, nanoseconds: 40_000)
        tally.record(.ok, nanoseconds: 60_000)
        tally.record(.timeout, nanoseconds: 2_000_000_000)
        tally.record(.unavailable, nanoseconds: 20_000_000_000)
        return tally
    }

    @Test func aLinkCallsReportNamesItsCountsAndReadsBack() throws {
        let report = CallHop.LinkCalls(target: "com.b", calls: Self.tally(), endedLink: 3)
        let frame = try ProtocolJSON.frame(report)
        let body = Array(frame[Frame.headerSize...])
        let object = try #require(try JSONSerialization.jsonObject(with: Data(body)) as? [String: Any])
        #expect(object["type"] as? String == "linkCalls")
        #expect(object["counts"] as? [String: Int] == ["ok": 2, "timeout": 1, "unavailable": 1])
        #expect((object["buckets"] as? [Int])?.count == CallHop.bucketCount)
        #expect(object["sumNs"] as? Int == 22_000_100_000)
        #expect(object["endedLink"] as? Int == 3)
        let back = try ProtocolJSON.decode(CallHop.LinkCalls.self, from: body)
        #expect(back == report)
        #expect(back.calls.problem == nil)
        #expect(back.calls.counts[.ok] == 2 && back.calls.buckets[0] == 1 && back.calls.buckets[1] == 1 && back.calls.buckets[CallHop.bucketCount - 1] == 1)
    }

    @Test func aReportThatCannotBeTrueIsRefused() throws {
        var extra = Self.tally()
        extra.counts.error += 1
        #expect(extra.problem != nil)
        var denied = Self.tally()
        denied.counts.denied = 1
        denied.buckets[0] += 1
        #expect(denied.problem != nil)
        var short = Self.tally()
        short.buckets.removeLast()
        #expect(short.problem != nil)
        var negative = Self.tally()
        negative.sumNs = -1
        #expect(negative.problem != nil)
        // Counts whose sums would wrap past Int64 (they "added up" with a wrapping sum, and the
        // next scrape of the metrics crashed the supervisor).
        var huge = CallHop.Tally()
        huge.counts.ok = 1 << 62
        huge.counts.error = 1 << 62
        huge.buckets[0] = 1 << 62
        huge.buckets[1] = 1 << 62
        #expect(huge.problem == "a count over \(CallHop.largestReportedCount)")
        #expect(CallHop.StreamTally(opened: .max).problem != nil)
        // Named counts: an outcome it does not know is not counted, one it does not name counts 0.
        let read = try ProtocolJSON.decode(CallHop.LinkCalls.self, from: Array(#"{"type":"linkCalls","target":"b","counts":{"ok":1,"later":9},"buckets":[1,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0],"sumNs":5}"#.utf8))
        #expect(read.calls.counts[.ok] == 1 && read.calls.counts.total == 1 && read.calls.problem == nil)
    }
}
