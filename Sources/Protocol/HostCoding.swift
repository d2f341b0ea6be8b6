import PluginProtocol

/// The typed surface of SPEC §12's host API over raw JSON, shared by `PluginHost` and
/// `SupervisorClient`: one way to decode an answer, to turn a typed host method into the JSON
/// handler both keep, and to write a timeout.
public enum HostCoding {
    /// `json` as `R`, or `badRequest` naming `what` was answered.
    public static func decode<R: Decodable>(_ type: R.Type, _ json: [UInt8], of what: String) throws -> R {
        do { return try ProtocolJSON.decode(R.self, from: json) } catch {
            throw ErrorBody(.badRequest, "the answer of \(what) is not a \(R.self): \(error)")
        }
    }

    /// `params` as JSON, or `badRequest` naming what they were for.
    public static func encode<P: Encodable>(_ params: P, for what: String) throws -> [UInt8] {
        do { return try ProtocolJSON.encode(params) } catch {
            throw ErrorBody(.badRequest, "the params of \(what) cannot be encoded: \(error)")
        }
    }

    /// How a host library sends a stream call's input: `send` takes one element's JSON, once the
    /// plugin has room for it.
    public typealias InputFeed = @Sendable (_ send: @Sendable ([UInt8]) async throws -> Void) async throws -> Void

    /// The input feed of `input`'s elements, each encoded (or `badRequest` naming `what`).
    public static func feed<Input: AsyncSequence & Sendable>(_ input: Input, for what: String) -> InputFeed where Input.Element: Encodable {
        { send in
            for try await element in input { try await send(try encode(element, for: what)) }
        }
    }

    /// A stream call's answer (`receiver`'s chunks), each decoded as `Element`.
    public static func stream<Element: Decodable & Sendable>(_ receiver: ChunkReceiver, of what: String,
                                                            as: Element.Type = Element.self) -> PluginStream<Element> {
        PluginStream(receiver) { try decode(Element.self, $0, of: what) }
    }

    /// What a `reply` (`env`, over `bytes`) answers: its `result` JSON (`null` when it has none),
    /// or its `error` (one that is not an error object is the plugin's error, with its text).
    public static func answer(of env: Envelope, in bytes: UnsafeRawBufferPointer) -> Result<[UInt8], ErrorBody> {
        if let e = env.error {
            return .failure((try? ProtocolJSON.decode(ErrorBody.self, from: UnsafeRawBufferPointer(rebasing: bytes[e])))
                            ?? ErrorBody(.pluginError, String(decoding: bytes[e], as: UTF8.self)))
        }
        return .success(env.result.map { Array(bytes[$0]) } ?? Array("null".utf8))
    }

    /// A typed host method as a JSON handler: params that do not decode are `badRequest`, a result
    /// that does not encode is `pluginError`; what `body` throws goes on as it is.
    public static func method<P: Decodable & Sendable, R: Encodable & Sendable>(
        _ name: String, _ body: @escaping @Sendable (P) async throws -> R
    ) -> @Sendable ([UInt8]) async throws -> [UInt8] {
        { json in
            let params: P
            do { params = try ProtocolJSON.decode(P.self, from: json) } catch {
                throw ErrorBody(.badRequest, "the params of the host's \(name) do not fit: \(error)")
            }
            let result = try await body(params)
            do { return try ProtocolJSON.encode(result) } catch {
                throw ErrorBody(.pluginError, "the host's \(name) returned what cannot be encoded: \(error)")
            }
        }
    }

    /// A timeout in whole milliseconds, at least 1 (`timeoutMs`).
    public static func milliseconds(_ duration: Duration) -> UInt64 {
        let (seconds, attoseconds) = duration.components
        return UInt64(max(1, seconds * 1000 + attoseconds / 1_000_000_000_000_000))
    }
}
