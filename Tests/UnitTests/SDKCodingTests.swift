import Foundation
import PluginProtocol
@testable import PluginSDK
import Testing

/// The SDK's plain coding of Int, Bool and String writes what JSONEncoder writes and reads what
/// JSONDecoder reads, and leaves every other case to them.
@Suite struct SDKCodingTests {
    func foundation<T: Encodable>(_ value: T) throws -> [UInt8] {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.withoutEscapingSlashes]
        return Array(try encoder.encode(value))
    }

    @Test func encodesAsJSONEncoderDoes() throws {
        /// What the plain path appends for `value`, nil when it declines.
        func plainEncoded<T>(_ value: T) -> [UInt8]? {
            var out: [UInt8] = []
            return Plain.append(value, to: &out) ? out : nil
        }
        for v in [0, 1, -1, 42, Int.max, Int.min] { #expect(plainEncoded(v) == (try foundation(v))) }
        for v in [true, false] { #expect(plainEncoded(v) == (try foundation(v))) }
        for v in ["", "hello", "a/b", "héllo wörld", "日本語", "🙂", "\u{2028}", "\u{7F}", "tab\there"] {
            if let plain = plainEncoded(v) { #expect(plain == (try foundation(v)), "\(v)") }
        }
        // Escapes are JSONEncoder's: the plain path declines.
        for v in ["quote\"", "back\\slash", "line\nbreak", "\u{01}"] { #expect(plainEncoded(v) == nil) }
        #expect(plainEncoded(1.5) == nil)
        #expect(plainEncoded([1]) == nil)
    }

    @Test func decodesAsJSONDecoderDoes() throws {
        func plain<T>(_ json: String, _: T.Type) -> T? { Array(json.utf8).withUnsafeBytes { Plain.decode($0) } }
        for text in ["0", "1", "-1", " 42 ", "9223372036854775807", "-9223372036854775808"] {
            #expect(plain(text, Int.self) == (try JSONDecoder().decode(Int.self, from: Data(text.utf8))), "\(text)")
        }
        // Left to JSONDecoder: fractions, exponents, leading zeros, overflow, other types.
        for text in ["1.0", "1e3", "01", "9223372036854775808", "\"1\"", "null", "", "-", "+1"] { #expect(plain(text, Int.self) == nil, "\(text)") }
        #expect(plain("true", Bool.self) == true && plain(" false\n", Bool.self) == false && plain("1", Bool.self) == nil)
        #expect(plain(#""hello""#, String.self) == "hello")
        #expect(plain(#""日本 🙂""#, String.self) == "日本 🙂")
        #expect(plain(#""a\"b""#, String.self) == nil && plain(#""a\nb""#, String.self) == nil && plain("hello", String.self) == nil)
    }
}

/// The SDK reads `startup`'s payload by hand (StartupPayload(reading:)) as JSONDecoder would: the
/// supervisor's payload, with and without its optional members, unknown ones skipped.
@Suite struct StartupPayloadReadingTests {
    @Test func readsWhatJSONDecoderReads() throws {
        let payloads = [
            #"{"identifier":"com.example.q\"uote","version":"1.2.3","dataDirectory":"/h/data/é","liveDirectory":"/h/live/x","bundleDirectory":"/b","dependencies":["a","b\\c"]}"#,
            #"{"identifier":"p","version":"1","dataDirectory":"/d","bundleDirectory":"/b","dependencies":[],"later":{"x":[1,2]}}"#,
            #"{"identifier":"p","version":"1","dataDirectory":"/d","bundleDirectory":"/b","liveDirectory":null}"#,
        ]
        for text in payloads {
            let bytes = Array(text.utf8)
            #expect(try StartupPayload(reading: bytes) == JSONDecoder().decode(StartupPayload.self, from: Data(bytes)), "\(text)")
        }
    }

    @Test func refusesWhatJSONDecoderRefuses() {
        for text in [#"{"identifier":"p"}"#, #"{"identifier":1,"version":"1","dataDirectory":"/d","bundleDirectory":"/b"}"#,
                     #"{"identifier":"p","version":"1","dataDirectory":"/d","bundleDirectory":"/b","dependencies":"a"}"#, "[]", "{"] {
            #expect(throws: JSONReadingError.self, "\(text)") { try StartupPayload(reading: Array(text.utf8)) }
            #expect(throws: (any Error).self) { try JSONDecoder().decode(StartupPayload.self, from: Data(text.utf8)) }
        }
    }
}
