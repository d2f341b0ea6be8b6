import CPluginABI
import Foundation
import PluginProtocol
@testable import PluginSDK
import Synchronization
import Testing

/// The Swift SDK's call path (issue 34): params decoded once from the message's bytes, before any
/// task; results and params encoded once, straight into the frame; a synchronous method's reply
/// built in its thread's reusable buffer. Driven through a PluginRuntime whose host records what
/// it sends (InlineMethodTests.Wire).
@Suite struct SDKHotPathTests {
    typealias Wire = InlineMethodTests.Wire

    struct Point: Codable, Sendable, Equatable { var x: Int; var label: String }

    final class Methods: Pluggable {
        let ran = Atomic<Int>(0)
        private let context = Mutex<PluginContext?>(nil)
        init() {}
        func startup(_ context: PluginContext) async throws { self.context.withLock { $0 = context } }
        func exports(_ api: PluginAPI) {
            api.method("echo") { (s: String) in s }
            api.method("repeat") { (n: Int) in String(repeating: "x", count: n) }
            api.method("negate") { (n: Int) in -n }
            api.method("point") { (p: Point) in Point(x: p.x + 1, label: p.label + "!") }
            api.method("quoted") { () in "say \"hi\"\n" }
            api.method("fail") { (_: Int) throws -> Int in throw PluginError(.denied, "no") }
            api.method("count") { (n: Int) async throws -> Int in
                self.ran.add(1, ordering: .relaxed)
                return n + 1
            }
            api.method("asyncPoint") { (p: Point) async throws -> Point in Point(x: p.x * 2, label: p.label) }
            api.method("forward") { (p: Point) async throws -> Point in
                guard let ctx = self.context.withLock({ $0 }) else { throw PluginError(.unavailable, "not started") }
                return try await ctx.call("b", "point", p, as: Point.self)
            }
            api.method("forwardText") { (s: String) async throws -> Int in
                guard let ctx = self.context.withLock({ $0 }) else { throw PluginError(.unavailable, "not started") }
                return try await ctx.call("b", "length", s, as: Int.self)
            }
        }
    }

    /// The reply to call `id`: its whole frame (prefix and body) and its result or error member.
    func reply(_ wire: Wire, _ id: UInt64) throws -> (frame: [UInt8], result: String?, error: String?) {
        let (sent, env) = try wire.wait("the reply to \(id)") { env, _ in env.kind == .reply && env.id == id }
        return sent.frame.withUnsafeBytes { raw in
            (sent.frame, env.result.map { String(decoding: raw[$0], as: UTF8.self) }, env.error.map { String(decoding: raw[$0], as: UTF8.self) })
        }
    }

    func started(_ wire: Wire, _ plugin: Methods) throws -> PluginRuntime {
        let runtime = wire.runtime(plugin)
        wire.deliver(runtime, #"{"type":"event","id":1,"name":"startup","payload":{"identifier":"a","version":"1.0.0","dataDirectory":"/tmp","bundleDirectory":"/tmp","dependencies":["b"]}}"#)
        _ = try wire.wait("startup's reply") { env, _ in env.kind == .reply && env.id == 1 }
        return runtime
    }

    @Test("synchronous methods answer in whole frames of their own, one after another in one reused buffer, large and small, plain and Codable, and errors")
    func syncRepliesInOneBuffer() async throws {
        try await InlineMethodTests.onOwnThread {
            let wire = Wire()
            let runtime = wire.runtime(Methods())
            wire.deliver(runtime, #"{"type":"call","id":2,"method":"echo","params":"ab"}"#)
            wire.deliver(runtime, #"{"type":"call","id":3,"method":"repeat","params":20000}"#)
            wire.deliver(runtime, #"{"type":"call","id":4,"method":"echo","params":"c"}"#)
            wire.deliver(runtime, #"{"type":"call","id":5,"method":"negate","params":-9223372036854775807}"#)
            wire.deliver(runtime, #"{"type":"call","id":6,"method":"point","params":{"x":1,"label":"p"}}"#)
            wire.deliver(runtime, #"{"type":"call","id":7,"method":"quoted"}"#)
            wire.deliver(runtime, #"{"type":"call","id":8,"method":"fail","params":1}"#)
            wire.deliver(runtime, #"{"type":"call","id":9,"method":"echo","params":7}"#)

            // The frame exactly: the length prefix, then the body; what the host gets is the body.
            let small = try reply(wire, 2)
            #expect(String(decoding: small.frame, as: UTF8.self) == #"{"type":"reply","id":2,"result":"ab"}"#)
            #expect(try reply(wire, 3).result == "\"" + String(repeating: "x", count: 20000) + "\"")
            #expect(String(decoding: try reply(wire, 4).frame, as: UTF8.self) == #"{"type":"reply","id":4,"result":"c"}"#)
            #expect(try reply(wire, 5).result == "9223372036854775807")
            let point = try #require(try reply(wire, 6).result)
            #expect(try JSONDecoder().decode(Point.self, from: Data(point.utf8)) == Point(x: 2, label: "p!"))
            #expect(try reply(wire, 7).result == #""say \"hi\"\n""#)
            #expect(try reply(wire, 8).error?.contains(#""code":"denied""#) == true)
            let wrongType = try reply(wire, 9)
            #expect(wrongType.result == nil && wrongType.error?.contains("badRequest") == true, "\(wrongType.error ?? "no error")")
        }
    }

    @Test("an async method whose params do not decode is answered badRequest before receive returns, and its code never runs")
    func asyncBadParamsAnsweredAtOnce() async throws {
        try await InlineMethodTests.onOwnThread {
            let wire = Wire()
            let plugin = Methods()
            let runtime = wire.runtime(plugin)
            wire.deliver(runtime, #"{"type":"call","id":2,"method":"count","params":"seven"}"#)
            let sent = wire.frames.filter { $0.frame.withUnsafeBytes { (try? Envelope.parse($0))?.id == 2 } }
            #expect(sent.count == 1 && sent[0].byDeliverer, "answered on the delivering thread, before receive returned")
            #expect(try reply(wire, 2).error?.contains("badRequest") == true)
            wire.deliver(runtime, #"{"type":"call","id":3,"method":"count","params":41}"#)
            #expect(try reply(wire, 3).result == "42")
            #expect(plugin.ran.load(ordering: .relaxed) == 1)
            wire.deliver(runtime, #"{"type":"call","id":4,"method":"asyncPoint","params":{"x":3,"label":"q"}}"#)
            let point = try #require(try reply(wire, 4).result)
            #expect(try JSONDecoder().decode(Point.self, from: Data(point.utf8)) == Point(x: 6, label: "q"))
        }
    }

    @Test("context.call writes its params straight into the call frame (Codable and plain) and decodes the answer as asked")
    func callParamsInTheFrame() async throws {
        try await InlineMethodTests.onOwnThread {
            let wire = Wire()
            let runtime = try started(wire, Methods())
            wire.deliver(runtime, #"{"type":"call","id":10,"method":"forward","params":{"x":5,"label":"r"}}"#)
            let (call, env) = try wire.wait("the call to b.point") { env, raw in
                env.kind == .call && Envelope.string(raw, env.method) == "point"
            }
            let params = call.frame.withUnsafeBytes { raw in env.params.map { String(decoding: raw[$0], as: UTF8.self) } }
            #expect(try JSONDecoder().decode(Point.self, from: Data((params ?? "").utf8)) == Point(x: 5, label: "r"))
            wire.deliver(runtime, #"{"type":"reply","id":\#(env.id!),"result":{"x":50,"label":"back"}}"#)
            let answer = try #require(try reply(wire, 10).result)
            #expect(try JSONDecoder().decode(Point.self, from: Data(answer.utf8)) == Point(x: 50, label: "back"))

            wire.deliver(runtime, #"{"type":"call","id":11,"method":"forwardText","params":"héllo"}"#)
            let (text, textEnv) = try wire.wait("the call to b.length") { env, raw in
                env.kind == .call && Envelope.string(raw, env.method) == "length"
            }
            #expect(text.frame.withUnsafeBytes { raw in textEnv.params.map { String(decoding: raw[$0], as: UTF8.self) } } == "\"héllo\"")
            // An answer of the wrong type fails the caller's call with the reason, naming both sides.
            wire.deliver(runtime, #"{"type":"reply","id":\#(textEnv.id!),"result":"five"}"#)
            let failed = try reply(wire, 11)
            #expect(failed.error?.contains("b.length") == true, "\(failed.error ?? "no error")")
        }
    }
}
