import PluginProtocol
import Synchronization
import Testing
import SupervisorCore
@testable import SupervisorKit

/// The parts of streams (SPEC §13) that need no process: the frames and their fields, what a worker
/// may send, the reader's window (`ChunkReceiver`) and the producer's (`CreditGate`).
@Suite struct StreamUnitTests {
    static func env(_ frame: [UInt8]) throws -> Envelope {
        try frame.withUnsafeBytes { try Envelope.parse(UnsafeRawBufferPointer(rebasing: $0[Frame.headerSize...])) }
    }

    @Test func framesCarryTheirFields() throws {
        let chunk = try Self.env(Array("{\"x\":1}".utf8).withUnsafeBytes { StreamFrames.chunk(id: 9, seq: 3, data: $0, into: [UInt8]()) })
        #expect(chunk.kind == .chunk && chunk.id == 9 && chunk.seq == 3 && !chunk.input && !chunk.end && chunk.data != nil)
        let input = try Self.env(Array("2".utf8).withUnsafeBytes { StreamFrames.chunk(id: 9, seq: 0, data: $0, input: true, into: [UInt8]()) })
        #expect(input.input && input.seq == 0)
        let end = try Self.env(StreamFrames.inputEnd(id: 9, count: 4, into: [UInt8]()))
        #expect(end.input && end.end && end.seq == 4 && end.data == nil)
        let credit = try Self.env(StreamFrames.credit(id: 9, n: 8, input: true, into: [UInt8]()))
        #expect(credit.kind == .credit && credit.n == 8 && credit.input)
        // Flags are true only for the literal true.
        let odd = try Array(#"{"type":"call","id":1,"stream":"true","input":1,"end":false}"#.utf8).withUnsafeBytes { try Envelope.parse($0) }
        #expect(!odd.stream && !odd.input && !odd.end)
    }

    @Test func aForwardedCallKeepsItsStreamFlags() throws {
        let request = Array(#"{"type":"call","id":1,"target":"q","method":"m","stream":true,"input":true,"junk":true}"#.utf8)
        var hop = CallHop()
        let frame = try request.withUnsafeBytes { raw in
            let env = try Envelope.parse(raw)
            return hop.forward(.call, id: 5, from: "p", env, in: raw, into: [UInt8]()).frame
        }
        let forwarded = try Self.env(frame)
        #expect(forwarded.stream && forwarded.input && forwarded.id == 5)
        #expect(!String(decoding: frame, as: UTF8.self).contains("junk"))
    }

    @Test func aWorkerMaySendChunksCreditAndCancel() {
        #expect(WorkerMessageTests.read(#"{"type":"chunk","id":3,"seq":0,"data":1}"#) == .stream(.chunk))
        #expect(WorkerMessageTests.read(#"{"type":"credit","id":3,"n":8}"#) == .stream(.credit))
        #expect(WorkerMessageTests.read(#"{"type":"cancel","id":3}"#) == .cancel(id: 3))
        #expect(WorkerMessageTests.read(#"{"type":"chunk","seq":0,"data":1}"#) == .violation("chunk without an id"))
        #expect(WorkerMessageTests.read(#"{"type":"cancel"}"#) == .violation("cancel without an id"))
        #expect(WorkerMessageTests.read(#"{"type":"chunk","id":3,"seq":0,"data":1}"#, saidHello: false) == .violation("chunk before hello"))
    }

    @Test func onlyMessagesThatCarryAValueMayCarryBytes() {
        #expect(WorkerMessageTests.read(#"{"type":"log","level":"info","message":"m","attachments":[{"length":1}]}"#)
                == .violation("a log message with attachments"))
        // A chunk's element of raw bytes: one inline attachment, exactly as announced.
        func chunk(_ attachments: String, _ tail: [UInt8]?) -> WorkerMessage {
            let bytes = Array(#"{"type":"chunk","id":3,"seq":0,"data":{"$bytes":0},"attachments":\#(attachments)}"#.utf8) + (tail.map { [0] + $0 } ?? [])
            return bytes.withUnsafeBytes { WorkerMessage.read($0, maxDepth: 64, saidHello: true, plugin: "p").0 }
        }
        #expect(chunk(#"[{"length":2}]"#, [7, 8]) == .stream(.chunk))
        #expect(chunk(#"[{"length":1}]"#, nil) == .violation("a chunk's attachment announces 1 inline bytes and 0 came"))
        #expect(chunk(#"[{"length":1,"fd":true}]"#, []) == .violation("a chunk carries one element of bytes, inline (at most 64 KiB): 1 attachments, 1 of them descriptors"))
        #expect(chunk(#"[{"length":1},{"length":1}]"#, [1, 2]) == .violation("a chunk carries one element of bytes, inline (at most 64 KiB): 2 attachments, 0 of them descriptors"))
        #expect(WorkerMessageTests.read(#"{"type":"reply","id":3,"result":{"$bytes":0},"attachments":[{"length":1}]}"#) == .reply(id: 3))
    }

    @Test func aReceiverHoldsItsWindowAndGrantsAsItIsRead() async throws {
        let granted = Mutex<[Int]>([])
        let gaveUp = Mutex(0)
        let receiver = ChunkReceiver(grant: { n in granted.withLock { $0.append(n) } }, giveUp: { gaveUp.withLock { $0 += 1 } })
        for i in 0..<16 { #expect(receiver.received([UInt8(i)]) == .kept) }
        // A 17th before anything was read is more than the producer's credit.
        #expect(receiver.received([99]) == .overCredit)
        for i in 0..<8 { #expect(try await receiver.next() == [UInt8(i)]) }
        #expect(granted.withLock { $0 } == [8])
        for i in 16..<24 { #expect(receiver.received([UInt8(i)]) == .kept) }
        #expect(receiver.received([99]) == .overCredit)
        receiver.finish(.success(()))
        var rest: [UInt8] = []
        while let chunk = try await receiver.next() { rest += chunk }
        // What was buffered is read before the end.
        #expect(rest == Array(8..<24).map(UInt8.init))
        receiver.close()
        #expect(gaveUp.withLock { $0 } == 0)
        #expect(receiver.received([1]) == .dropped)
    }

    @Test func closingEarlyGivesUpAndWakesTheReader() async throws {
        let gaveUp = Mutex(0)
        let receiver = ChunkReceiver(grant: { _ in }, giveUp: { gaveUp.withLock { $0 += 1 } })
        let reading = Task { try await receiver.next() }
        // The reader is waiting (or about to); closing wakes it with CancellationError.
        receiver.close()
        await #expect(throws: CancellationError.self) { try await reading.value }
        #expect(gaveUp.withLock { $0 } == 1)
        receiver.close()
        #expect(gaveUp.withLock { $0 } == 1)
        // An error ends the stream for a reader.
        let failing = ChunkReceiver(grant: { _ in }, giveUp: {})
        failing.finish(.failure(ErrorBody(.unavailable, "gone")))
        await #expect(throws: ErrorBody.self) { try await failing.next() }
    }

    @Test func aGateLetsThroughItsCreditAndWaitsForMore() async throws {
        let gate = CreditGate(initial: 2)
        try await gate.take()
        try await gate.take()
        let third = Task { try await gate.take() }
        #expect(gate.grant(1))
        try await third.value
        #expect(!gate.grant(StreamFrames.largestCredit + 1))
        let waiting = Task { try await gate.take() }
        gate.fail(ErrorBody(.unavailable, "the reader went away"))
        await #expect(throws: ErrorBody.self) { try await waiting.value }
        await #expect(throws: ErrorBody.self) { try await gate.take() }
        // A cancelled task stops waiting.
        let idle = CreditGate(initial: 0)
        let cancelled = Task { try await idle.take() }
        cancelled.cancel()
        await #expect(throws: CancellationError.self) { try await cancelled.value }
    }

    @Test func theWordAtATimeScanFindsWhatTheByteLoopFinds() {
        // Every special byte at every offset around the word boundaries, and none at all.
        for length in [0, 1, 7, 8, 9, 15, 16, 17, 31, 64, 100] {
            let plain = [UInt8](repeating: UInt8(ascii: "x"), count: length)
            #expect(plain.withUnsafeBytes { JSONScanner.firstSpecial($0, from: 0) } == length)
            for at in 0..<length {
                for special: UInt8 in [0x00, 0x0A, 0x1F, 0x22, 0x5C] {
                    var bytes = plain
                    bytes[at] = special
                    // Bytes that are not special around it: high ones (UTF-8), 0x20, 0x21, 0x23, 0x5B, 0x5D.
                    if at + 1 < length { bytes[at + 1] = 0xE2 }
                    if at > 0 { bytes[at - 1] = [0x20, 0x21, 0x23, 0x5B, 0x5D, 0xFF][at % 6] }
                    let found = bytes.withUnsafeBytes { JSONScanner.firstSpecial($0, from: 0) }
                    #expect(found == at, "length \(length), \(special) at \(at)")
                    if at > 0 { #expect(bytes.withUnsafeBytes { JSONScanner.firstSpecial($0, from: at) } == at) }
                }
            }
        }
        // UTF-8 and DEL are not special.
        let text = Array("héllo wörld \u{7F} 日本語 and more text".utf8)
        #expect(text.withUnsafeBytes { JSONScanner.firstSpecial($0, from: 0) } == text.count)
    }

    @Test func aRelayedChunkIsItsHeadTheDataAndTheTail() throws {
        let data = Array(#"{"x":[1,2,3]}"#.utf8)
        var whole = StreamFrames.chunkHead(id: 4, seq: 9, dataCount: data.count, into: [UInt8]())
        whole += data
        whole += StreamFrames.chunkTail
        #expect(whole == data.withUnsafeBytes { StreamFrames.chunk(id: 4, seq: 9, data: $0, into: [UInt8]()) })
        let env = try Self.env(whole)
        #expect(env.kind == .chunk && env.id == 4 && env.seq == 9)
    }
}
