import IPC
import PluginProtocol
import Testing

@Suite struct JSONScannerTests {
    func envelope(_ s: String) throws -> Envelope {
        try Array(s.utf8).withUnsafeBytes { try Envelope.parse($0) }
    }

    @Test func routingFields() throws {
        let text = #"{"type":"call","id":42,"target":"a.b","method":"m\"x","params":{"deep":[1,2,{"k":null}]},"extra":true}"#
        let bytes = Array(text.utf8)
        try bytes.withUnsafeBytes { raw in
            let env = try Envelope.parse(raw)
            #expect(env.kind == .call)
            #expect(env.id == 42)
            #expect(Envelope.string(raw, env.target) == "a.b")
            #expect(Envelope.string(raw, env.method) == "m\"x")
            #expect(String(decoding: raw[env.params!], as: UTF8.self) == #"{"deep":[1,2,{"k":null}]}"#)
        }
    }

    @Test(arguments: [
        #"{"type":"call""#, #"{"type":"call",}"#, #"{"id":01}"#, "[1]", #"{"a":tru}"#, #"{"a":"\x"}"#,
        #"{"a":1} x"#, "", #"{"a":"line"# + "\n" + #""}"#, #"{"a":-}"#, #"{"a":1.}"#, #"{"a":1e}"#,
    ])
    func rejectsMalformed(_ text: String) {
        #expect(throws: JSONScanner.Failure.self) { try envelope(text) }
    }

    @Test func depthLimit() throws {
        let ok = "{\"a\":" + String(repeating: "[", count: 63) + String(repeating: "]", count: 63) + "}"
        _ = try envelope(ok)
        let deep = "{\"a\":" + String(repeating: "[", count: 64) + String(repeating: "]", count: 64) + "}"
        #expect(throws: JSONScanner.Failure.tooDeep(limit: 64)) { try envelope(deep) }
    }

    @Test func idMustBeUnsigned() throws {
        #expect(try envelope(#"{"type":"reply","id":-1}"#).badID)
        #expect(try envelope(#"{"type":"reply","id":1.5}"#).badID)
        #expect(try envelope(#"{"type":"reply","id":18446744073709551615}"#).id == UInt64.max)
        #expect(try envelope(#"{"type":"reply","id":18446744073709551616}"#).badID)
    }

    @Test func unicodeEscapes() throws {
        let text = #"{"type":"log","name":"\u00e9\ud83d\ude00\n"}"#
        try Array(text.utf8).withUnsafeBytes { raw in
            let env = try Envelope.parse(raw)
            #expect(Envelope.string(raw, env.name) == "é😀\n")
        }
    }

    @Test func builderRoundTrip() throws {
        var b = FrameBuilder(kind: .reply)
        b.uint("id", 1234567890123)
        b.string("name", "quote\" back\\ nl\n ctl\u{1}")
        b.error(.timeout, "late")
        let frame = b.finish()
        #expect(Int(frame[3]) + Int(frame[2]) << 8 == frame.count - 4)
        try frame[4...].withUnsafeBytes { raw in
            let env = try Envelope.parse(raw)
            #expect(env.kind == .reply)
            #expect(env.id == 1234567890123)
            #expect(Envelope.string(raw, env.name) == "quote\" back\\ nl\n ctl\u{1}")
            let e = try ProtocolJSON.decode(ErrorBody.self, from: UnsafeRawBufferPointer(rebasing: raw[env.error!]))
            #expect(e == ErrorBody(.timeout, "late"))
        }
    }
}

@Suite struct FrameDecoderTests {
    @Test func splitsAcrossReads() throws {
        var d = FrameDecoder(maxBody: 100)
        let frames = [UInt8].frame(body: Array("{\"a\":1}".utf8)) + [UInt8].frame(body: Array("{}".utf8))
        var got: [String] = []
        for byte in frames {
            [byte].withUnsafeBytes { d.append($0) }
            while let s = try d.next({ String(decoding: $0, as: UTF8.self) }) { got.append(s) }
        }
        #expect(got == ["{\"a\":1}", "{}"])
        #expect(d.state == .waitingForHeader)
    }

    @Test func refusesEmptyAndOversized() {
        var d = FrameDecoder(maxBody: 10)
        ([0, 0, 0, 0] as [UInt8]).withUnsafeBytes { d.append($0) }
        #expect(throws: Frame.HeaderError.empty) { try d.next { _ in () } }
        var e = FrameDecoder(maxBody: 10)
        ([0, 0, 0, 11] as [UInt8]).withUnsafeBytes { e.append($0) }
        #expect(throws: Frame.HeaderError.tooLarge(length: 11, limit: 10)) { try e.next { _ in () } }
    }
}

@Suite struct PluginURITests {
    @Test func parses() throws {
        let uri = try #require(PluginURI("plugin://com.example.greeter/hello/there?name=Ada%20L&x=a+b&flag"))
        #expect(uri.identifier == "com.example.greeter")
        #expect(uri.path == "/hello/there")
        #expect(uri.queryItems == ["name": "Ada L", "x": "a b", "flag": ""])
        #expect(PluginURI("plugin://a.b")?.path == "/")
        #expect(PluginURI("http://a.b/x") == nil)
        #expect(PluginURI("plugin://bad id/x") == nil)
        #expect(PluginURI("plugin:///x") == nil)
    }
}
