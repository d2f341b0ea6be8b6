#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif
import PluginProtocol

#if compiler(>=6.2)
/// What a method takes: any `Decodable` type. (`SendableMetatype`, which every ordinary type has, lets
/// the handler that decodes it run on any thread without a warning.)
public typealias MethodParameters = Decodable & SendableMetatype
/// What a method returns: any `Encodable` type.
public typealias MethodResult = Encodable & SendableMetatype
#else
/// What a method takes: any `Decodable` type.
public typealias MethodParameters = Decodable
/// What a method returns: any `Encodable` type.
public typealias MethodResult = Encodable
#endif

/// The API a plugin exports: named methods with Codable parameters and results, and handlers for
/// `plugin://<identifier>/<path>` URIs.
///
/// A method given a synchronous closure runs inline on the worker's I/O thread (no thread hop; keep
/// it short). One given an `async` closure runs on a task (kept from call to call: `CallTask`) and
/// can be cancelled when the caller gives up; `execution: .inline` runs that task without thread
/// hops (see `MethodExecution`).
public final class PluginAPI: Sendable {
    /// A method as the runtime runs it. The parameters are decoded once, on the thread that
    /// delivers the call, straight from the message's bytes; the result is encoded once, straight
    /// into the reply frame (`FrameEncoder.value`).
    enum Handler: Sendable {
        /// Decodes the params, runs the method and appends its result's JSON to the reply frame
        /// being built: no task, and no allocation for the commonest types (`Plain`).
        case sync(@Sendable (UnsafeRawBufferPointer?, inout [UInt8]) throws -> Void)
        /// Decodes the params and returns the method's work, which the runtime runs on a task
        /// (`MethodExecution`). The result comes back as an existential: an `Int`, a `Bool` or a
        /// `String` fits its inline buffer, so it costs no allocation either.
        case async(@Sendable (UnsafeRawBufferPointer?) throws -> AsyncWork, MethodExecution)
        /// A method answering with a stream (Streams.swift): the params, the call's input (empty
        /// unless the caller sends one), where the answer goes.
        case stream(@Sendable ([UInt8]?, ChunkReceiver, StreamSender) async throws -> Void)
        /// A method answering with raw bytes (Bytes.swift).
        case bytes(@Sendable ([UInt8]?) async throws -> Bytes)
    }

    /// An async method's call once its parameters are decoded: the method and its params as one
    /// value, held inline in the existential when the params take up to two words (an `Int`, a
    /// `String`, a small struct), so handing a call to its task allocates nothing (a closure
    /// capturing the params was a heap context per call).
    typealias AsyncWork = any AsyncCall

    func register(_ name: String, _ handler: Handler, idempotent: Bool = false) {
        methods.withLock { $0[name] = handler }
        idempotentMethods.withLock { if idempotent { $0.insert(name) } else { $0.remove(name) } }
    }

    private let methods = Guarded<[String: Handler]>([:])
    private let idempotentMethods = Guarded<Set<String>>([])
    private let routes = Guarded<[String: Handler]>([:])

    init() {}

    /// Exports `name`, answered synchronously.
    ///
    /// `idempotent`: a call may run twice with the same effect (a read, a put of a whole value).
    /// When its worker ends while the plugin runs such a call, the supervisor sends it again to the
    /// next worker (at most the manifest's `limits.retries` times, SPEC §15); any other call the
    /// plugin had started then fails with `unavailable` and `started: true`. The manifest's
    /// `idempotent` list says the same.
    public func method<Params: MethodParameters, Result: MethodResult>(
        _ name: String, idempotent: Bool = false, _ body: @escaping @Sendable (Params) throws -> Result
    ) {
        register(name, .sync { raw, out in try Coding.append(body(try Coding.decode(Params.self, raw)), to: &out) }, idempotent: idempotent)
    }

    /// Exports `name`, answered on a task (one kept for the calls after it), run as `execution` says.
    /// `idempotent`: as for a synchronous method.
    public func method<Params: MethodParameters, Result: MethodResult>(
        _ name: String, idempotent: Bool = false, execution: MethodExecution = .task,
        _ body: @escaping @Sendable (Params) async throws -> Result
    ) {
        let method = AsyncMethod(body)
        register(name, .async({ raw in DecodedCall(method: method, params: try Coding.decode(Params.self, raw)) }, execution),
                 idempotent: idempotent)
    }

    /// Exports `name` taking no parameters. `idempotent`: as above.
    public func method<Result: MethodResult>(_ name: String, idempotent: Bool = false, _ body: @escaping @Sendable () throws -> Result) {
        register(name, .sync { _, out in try Coding.append(body(), to: &out) }, idempotent: idempotent)
    }

    /// Exports `name` taking no parameters, answered on a task (one kept for the calls after it), run
    /// as `execution` says. `idempotent`: as above.
    public func method<Result: MethodResult>(_ name: String, idempotent: Bool = false, execution: MethodExecution = .task,
                                             _ body: @escaping @Sendable () async throws -> Result) {
        let method = AsyncMethod<Empty, Result> { _ in try await body() }
        register(name, .async({ _ in DecodedCall(method: method, params: Empty()) }, execution), idempotent: idempotent)
    }

    /// Answers `open` for `plugin://<this plugin>/<path>`. `path` is matched exactly, or as a prefix
    /// when it ends in `*`.
    public func route<Result: MethodResult>(_ path: String, _ body: @escaping @Sendable (OpenRequest) async throws -> Result) {
        routes.withLock {
            let method = AsyncMethod(body)
            $0[path] = .async({ raw in DecodedCall(method: method, params: try Coding.decode(OpenRequest.self, raw)) }, .task)
        }
    }

    func handler(forMethod name: String) -> Handler? { methods.withLock { $0[name] } }

    func handler(forPath path: String) -> Handler? {
        routes.withLock { table in
            if let exact = table[path] { return exact }
            var best: (Int, Handler)?
            for (pattern, handler) in table where pattern.hasSuffix("*") {
                let prefix = pattern.dropLast()
                if path.hasPrefix(prefix), prefix.count > (best?.0 ?? -1) { best = (prefix.count, handler) }
            }
            return best?.1
        }
    }

    var methodNames: [String] { methods.withLock { $0.keys.sorted() } }

    /// The methods exported with `idempotent: true`.
    var idempotentNames: [String] { idempotentMethods.withLock { $0.sorted() } }
}

/// An async method's call, ready to run on a task: `run` calls the method.
protocol AsyncCall: Sendable {
    func run() async throws -> any MethodResult
}

/// An async method with params, registered once and shared by its calls.
final class AsyncMethod<Params: MethodParameters, Result: MethodResult>: Sendable {
    let body: @Sendable (Params) async throws -> Result
    init(_ body: @escaping @Sendable (Params) async throws -> Result) { self.body = body }
}

/// One call of an `AsyncMethod`: its params decoded (one word for the method, the params inline
/// beside it in `AsyncWork`'s buffer when they take up to two).
struct DecodedCall<Params: MethodParameters, Result: MethodResult>: AsyncCall {
    let method: AsyncMethod<Params, Result>
    /// Decoded for this one call and handed to its task, which alone touches it from here.
    nonisolated(unsafe) let params: Params

    func run() async throws -> any MethodResult { try await method.body(params) }
}

/// A call whose work is a closure (a method without params, a stream method's session).
struct ClosureCall: AsyncCall {
    let body: @Sendable () async throws -> any MethodResult
    init(_ body: @escaping @Sendable () async throws -> any MethodResult) { self.body = body }
    func run() async throws -> any MethodResult { try await body() }
}

/// How an async method's code runs.
public enum MethodExecution: Sendable {
    /// On a task on Swift's global executor (the default): the worker's I/O thread hands
    /// the call over and goes on reading, and the method may compute for as long as its timeout
    /// allows.
    case task
    /// Without thread hops, for methods that mostly wait on other plugins (relays, fan-outs,
    /// orchestrators): on the thread that delivered the call, right after it, and after each
    /// `await` on the thread that delivered what it awaited (a reply from another plugin), so a
    /// call that awaits another plugin costs no wake-up of a pool thread on either side. Calls that
    /// overlap run that way too, their pieces one after another on the worker's two delivering
    /// threads (as a C plugin's relay does), not in parallel on the global executor's threads.
    /// Its child tasks run the same way; a timer's or another thread's resumption goes to a global
    /// queue's thread.
    ///
    /// While its code runs, the worker reads no message (calls, replies, the watchdog's pings):
    /// never block in it (no `sleep`, no waiting on a lock another call holds, no blocking I/O)
    /// and do not compute long in it; `await` is fine. For anything else use `.task`.
    case inline
}

/// What a `plugin://` route handler receives.
public struct OpenRequest: Codable, Sendable {
    /// The whole URI, as opened (`plugin://com.example.greeter/hello?name=Ada`).
    public var uri: String
    /// The path after the identifier (`/hello`).
    public var path: String
    /// The query's items, percent-decoded (`["name": "Ada"]`); a repeated name keeps its last value.
    public var query: [String: String]
}

/// JSON coding of parameters and results.
enum Coding {
    static func decode<T: Decodable>(_ type: T.Type, _ raw: UnsafeRawBufferPointer?) throws -> T {
        if T.self == Empty.self { return Empty() as! T }
        guard let raw, !raw.isEmpty else {
            throw PluginError.badRequest("missing params: expected \(T.self)")
        }
        if let plain: T = Plain.decode(raw) { return plain }
        do {
            return try JSONDecoder().decode(T.self, from: Data(raw))
        } catch let error as DecodingError {
            throw PluginError.badRequest("params do not match \(T.self): \(Coding.describe(error))")
        }
    }

    static func decode<T: Decodable>(_ type: T.Type, _ raw: [UInt8]?) throws -> T {
        try raw.withUnsafeBytesOrNil { try decode(T.self, $0) }
    }

    /// Another plugin's answer as the type its caller asked for, or an error that names both sides.
    /// `what` names the call in an error only: built when the result does not decode, not on every
    /// call (an interpolated name is a heap string per call).
    static func decodeResult<T: Decodable>(_ type: T.Type, _ raw: [UInt8]?, of what: @autoclosure () -> String) throws -> T {
        try raw.withUnsafeBytesOrNil { try decodeResult(T.self, json: $0, of: what) }
    }

    /// The same, of an answer's result as it was copied out of the reply (nil: none).
    static func decodeResult<T: Decodable>(_ type: T.Type, _ raw: SmallBytes?, of what: @autoclosure () -> String) throws -> T {
        guard let raw else { return try decodeResult(T.self, json: nil, of: what) }
        return try raw.withUnsafeBytes { try decodeResult(T.self, json: $0, of: what) }
    }

    /// The result's JSON (nil: none, read as `null`).
    static func decodeResult<T: Decodable>(_ type: T.Type, json raw: UnsafeRawBufferPointer?, of what: () -> String) throws -> T {
        if T.self == Empty.self { return Empty() as! T }
        guard let bytes = raw else { return try Array("null".utf8).withUnsafeBytes { try decodeResult(T.self, json: $0, of: what) } }
        if let plain: T = Plain.decode(bytes) { return plain }
        do {
            return try JSONDecoder().decode(T.self, from: Data(bytes))
        } catch let error as DecodingError {
            let text = String(decoding: bytes.prefix(120), as: UTF8.self) + (bytes.count > 120 ? "…" : "")
            throw PluginError(.pluginError, "the result of \(what()) is not a \(T.self): \(Coding.describe(error)); it was \(text)")
        }
    }

    /// One element of a stream: raw bytes as they came for `Bytes` (a chunk of bytes), else its JSON.
    static func streamElement<T: Decodable>(_ type: T.Type, _ raw: [UInt8], of what: @autoclosure () -> String) throws -> T {
        if T.self == Bytes.self { return Bytes(raw) as! T }
        return try decodeResult(T.self, raw, of: what())
    }

    static func encode<T: Encodable>(_ value: T) throws -> [UInt8] {
        var out: [UInt8] = []
        try append(value, to: &out)
        return out
    }

    /// Appends `value`'s JSON to `out` (a frame being built): the plain types by hand, anything
    /// else through `JSONEncoder`. Called with an existential (`any MethodResult`), `T` is the
    /// value's own type, so the plain types still take the short way.
    static func append<T: Encodable>(_ value: T, to out: inout [UInt8]) throws {
        if T.self == Empty.self { return out.append(contentsOf: "null".utf8) }
        if Plain.append(value, to: &out) { return }
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.withoutEscapingSlashes]
        out.append(contentsOf: try encoder.encode(value))
    }

    /// Appends `value`'s JSON to `out` and returns the `Bytes` it holds (each written as
    /// `{"$bytes": i}`), in order: a call's params, straight into the call frame.
    static func appendAttached<T: Encodable>(_ value: T, to out: inout [UInt8]) throws -> [Bytes] {
        if T.self == Empty.self || Plain.isPlain(T.self) {
            try append(value, to: &out)
            return []
        }
        if let bytes = value as? Bytes {
            out.append(contentsOf: #"{"$bytes":0}"#.utf8)
            return [bytes]
        }
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.withoutEscapingSlashes]
        let collector = Guarded<[Bytes]>([])
        encoder.userInfo[Bytes.collectorKey] = collector
        out.append(contentsOf: try encoder.encode(value))
        return collector.withLock { $0 }
    }

    static func describe(_ error: DecodingError) -> String {
        switch error {
        case .keyNotFound(let key, _): return "missing key '\(key.stringValue)'"
        case .typeMismatch(let type, let ctx):
            let path = ctx.codingPath.map(\.stringValue).joined(separator: ".")
            return "expected \(type) at '\(path.isEmpty ? "the top level" : path)' (\(ctx.debugDescription))"
        case .valueNotFound(let type, let ctx):
            return "missing \(type) at '\(ctx.codingPath.map(\.stringValue).joined(separator: "."))'"
        case .dataCorrupted(let ctx): return ctx.debugDescription
        @unknown default: return "\(error)"
        }
    }
}

extension Optional where Wrapped == [UInt8] {
    func withUnsafeBytesOrNil<R>(_ body: (UnsafeRawBufferPointer?) throws -> R) rethrows -> R {
        switch self {
        case .none: return try body(nil)
        case .some(let bytes): return try bytes.withUnsafeBytes { try body($0) }
        }
    }
}

/// The commonest parameters and results (an `Int`, a `Bool`, a `String` without escapes) coded
/// without Foundation's JSON coders, whose fixed cost is most of a small call's time in the
/// plugin. Anything else, or any doubt (a number with a fraction or exponent, a string with an
/// escape), is left to JSONEncoder/JSONDecoder, and the bytes are the same either way.
enum Plain {
    /// Whether `T` is one of the plain types (those `append` may take).
    static func isPlain<T>(_: T.Type) -> Bool { T.self == Int.self || T.self == Bool.self || T.self == String.self }

    /// Appends `value`'s JSON to `out` if it is plain; false (nothing appended) otherwise.
    static func append<T>(_ value: T, to out: inout [UInt8]) -> Bool {
        if T.self == Int.self {
            appendInt(value as! Int, to: &out)
            return true
        }
        if T.self == Bool.self {
            out.append(contentsOf: ((value as! Bool) ? "true" : "false").utf8)
            return true
        }
        if T.self == String.self {
            var text = value as! String
            // Quotes, backslashes and control characters need escapes: JSONEncoder writes those.
            // Scanned and copied from the string's contiguous UTF-8 (a native string's own storage).
            return text.withUTF8 { utf8 -> Bool in
                let raw = UnsafeRawBufferPointer(utf8)
                guard JSONScanner.firstSpecial(raw, from: 0) == raw.count else { return false }
                out.append(0x22)
                out.append(contentsOf: raw)
                out.append(0x22)
                return true
            }
        }
        return false
    }

    /// `value` in decimal, without a `String` on the way.
    private static func appendInt(_ value: Int, to out: inout [UInt8]) {
        if value < 0 { out.append(UInt8(ascii: "-")) }
        var n = value.magnitude
        var digits: (UInt64, UInt64, UInt64) = (0, 0, 0)  // room for 20 digits
        var count = 0
        withUnsafeMutableBytes(of: &digits) { d in
            repeat {
                d[23 - count] = UInt8(n % 10) + 0x30
                n /= 10
                count += 1
            } while n > 0
            out.append(contentsOf: UnsafeRawBufferPointer(rebasing: d[(24 - count)...]))
        }
    }

    static func decode<T>(_ raw: UnsafeRawBufferPointer) -> T? {
        if T.self == Int.self { return int(raw).map { $0 as! T } }
        if T.self == Bool.self {
            let bytes = trimmed(raw)
            if bytes.elementsEqual("true".utf8) { return (true as! T) }
            if bytes.elementsEqual("false".utf8) { return (false as! T) }
            return nil
        }
        if T.self == String.self {
            let bytes = trimmed(raw)
            guard bytes.count >= 2, bytes.first == 0x22, bytes.last == 0x22 else { return nil }
            let inner = bytes.dropFirst().dropLast()
            guard JSONScanner.firstSpecial(UnsafeRawBufferPointer(rebasing: inner), from: 0) == inner.count else { return nil }
            // Invalid UTF-8 is JSONDecoder's to refuse.
            guard let text = String(validating: inner, as: UTF8.self) else { return nil }
            return (text as! T)
        }
        return nil
    }

    /// `-?[0-9]+` without a leading zero, within Int's range; nil for anything else.
    static func int(_ raw: UnsafeRawBufferPointer) -> Int? {
        let bytes = trimmed(raw)
        var digits = bytes[...]
        let negative = digits.first == UInt8(ascii: "-")
        if negative { digits = digits.dropFirst() }
        guard !digits.isEmpty, digits.count <= 19, digits.allSatisfy({ $0 >= 0x30 && $0 <= 0x39 }) else { return nil }
        guard digits.count == 1 || digits.first != 0x30 else { return nil }
        var value = 0
        for d in digits {
            let (m, o1) = value.multipliedReportingOverflow(by: 10)
            let (a, o2) = negative ? m.subtractingReportingOverflow(Int(d - 0x30)) : m.addingReportingOverflow(Int(d - 0x30))
            guard !o1, !o2 else { return nil }
            value = a
        }
        return value
    }

    /// `raw` without the whitespace around it (no copy).
    private static func trimmed(_ raw: UnsafeRawBufferPointer) -> Slice<UnsafeRawBufferPointer> {
        func isSpace(_ c: UInt8) -> Bool { c == 0x20 || c == 0x0A || c == 0x0D || c == 0x09 }
        var lo = 0, hi = raw.count
        while lo < hi, isSpace(raw[lo]) { lo += 1 }
        while hi > lo, isSpace(raw[hi - 1]) { hi -= 1 }
        return raw[lo..<hi]
    }
}
