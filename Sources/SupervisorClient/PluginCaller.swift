import PluginProtocol
import Protocol

/// The calls of SPEC §12 and §13 that `SupervisorClient` and `PluginHost` share: each implements
/// the primitives, which take and give raw JSON (a call, a call with bytes, an open, a stream
/// call), and gets the typed calls, opens and streams from this protocol's extension.
public protocol PluginCaller: Sendable {
    /// Calls `method` of the plugin `target` with params and result as raw JSON; `timeout` nil:
    /// the plugin's own (`limits.callTimeoutMs`).
    func callJSON(_ target: String, _ method: String, params: [UInt8]?, timeout: Duration?) async throws -> [UInt8]

    /// Calls `method` of `target` with raw bytes (SPEC §13): `params` name them `{"$bytes": i}`,
    /// `i` their index in `sending`. The descriptors stay the caller's.
    func callJSON(_ target: String, _ method: String, params: [UInt8]?, sending: [AttachedBytes], timeout: Duration?) async throws -> [UInt8]

    /// Calls `method` of `target`, which answers with raw bytes (SPEC §13).
    func callBytes<P: Encodable>(_ target: String, _ method: String, _ params: P, timeout: Duration?) async throws -> AttachedBytes

    /// Opens `plugin://<identifier>/<path>?<query>` and returns what the plugin answers as raw JSON.
    func openJSON(_ uri: String) async throws -> [UInt8]

    /// Calls the stream method `method` of `target` with params as raw JSON: its elements' JSON (or
    /// raw bytes) arrive in the receiver returned, which a `PluginStream` reads. `input`, when given,
    /// sends the call's input as the plugin grants room for it.
    func startStream(_ target: String, _ method: String, params: [UInt8]?, input: HostCoding.InputFeed?,
                     timeout: Duration?) -> ChunkReceiver
}

extension PluginCaller {
    /// Calls `method` of the plugin `target` with `params` and decodes its result. `timeout`
    /// defaults to the plugin's own (`limits.callTimeoutMs`). A call to a plugin that is starting or
    /// restarting waits for it; a cancelled task cancels its call (the plugin gets `cancel`).
    /// Throws the plugin's or the supervisor's `ErrorBody` (`.code`, `.message`).
    public func call<P: Encodable, R: Decodable>(_ target: String, _ method: String, _ params: P, as: R.Type = R.self,
                                                 timeout: Duration? = nil) async throws -> R {
        let json = try HostCoding.encode(params, for: "\(target).\(method)")
        return try HostCoding.decode(R.self, try await callJSON(target, method, params: json, timeout: timeout), of: "\(target).\(method)")
    }

    /// Calls `method` of the plugin `target` without params.
    public func call<R: Decodable>(_ target: String, _ method: String, as: R.Type = R.self, timeout: Duration? = nil) async throws -> R {
        try HostCoding.decode(R.self, try await callJSON(target, method, params: nil, timeout: timeout), of: "\(target).\(method)")
    }

    /// Calls `method` of `target` with raw bytes and decodes its result (see
    /// `callJSON(_:_:params:sending:timeout:)`).
    public func call<P: Encodable, R: Decodable>(_ target: String, _ method: String, _ params: P, sending: [AttachedBytes],
                                                 as: R.Type = R.self, timeout: Duration? = nil) async throws -> R {
        let json = try HostCoding.encode(params, for: "\(target).\(method)")
        return try HostCoding.decode(R.self, try await callJSON(target, method, params: json, sending: sending, timeout: timeout), of: "\(target).\(method)")
    }

    /// Opens `plugin://<identifier>/<path>?<query>` and decodes what the plugin answers.
    public func open<R: Decodable>(_ uri: String, as: R.Type = R.self) async throws -> R {
        try HostCoding.decode(R.self, try await openJSON(uri), of: uri)
    }

    /// Calls the stream method `method` of `target` (SPEC §13): its elements, decoded as `Element`,
    /// as they come. Reading slowly slows the plugin; leaving the loop early, or cancelling the
    /// task, cancels the call. `timeout` is the whole stream's (the gap between two elements is
    /// bounded by the plugin's `limits.streamIdleTimeoutMs`). A plugin that is starting or
    /// restarting is waited for, as for `call`.
    public func stream<P: Encodable, Element: Decodable & Sendable>(_ target: String, _ method: String, _ params: P,
                                                                   as: Element.Type = Element.self, timeout: Duration? = nil) -> PluginStream<Element> {
        let what = "\(target).\(method)"
        return HostCoding.stream(startStream(target, method, encoding: params, for: what, input: nil, timeout: timeout), of: what)
    }

    /// Calls the stream method `method` of `target` with a stream of `input` elements, sent as the
    /// plugin reads them.
    public func stream<P: Encodable, Input: AsyncSequence & Sendable, Element: Decodable & Sendable>(
        _ target: String, _ method: String, _ params: P, input: Input, as: Element.Type = Element.self, timeout: Duration? = nil
    ) -> PluginStream<Element> where Input.Element: Encodable {
        let what = "\(target).\(method)"
        return HostCoding.stream(startStream(target, method, encoding: params, for: what, input: HostCoding.feed(input, for: what),
                                             timeout: timeout), of: what)
    }

    /// Calls a stream method whose elements are raw bytes (SPEC §13: the Swift SDK's
    /// `StreamOutput<Bytes>`, at most 64 KiB each, inline in their chunks: no JSON, no base64).
    public func streamBytes<P: Encodable>(_ target: String, _ method: String, _ params: P, timeout: Duration? = nil) -> PluginStream<[UInt8]> {
        PluginStream(startStream(target, method, encoding: params, for: "\(target).\(method)", input: nil, timeout: timeout)) { $0 }
    }

    /// A stream call with params and elements as raw JSON.
    public func streamJSON(_ target: String, _ method: String, params: [UInt8]?, timeout: Duration? = nil) -> PluginStream<[UInt8]> {
        PluginStream(startStream(target, method, params: params, input: nil, timeout: timeout)) { $0 }
    }

    /// `startStream` with `params` encoded; params that do not encode end the stream at once with
    /// the error (nothing is sent).
    private func startStream<P: Encodable>(_ target: String, _ method: String, encoding params: P, for what: String,
                                           input: HostCoding.InputFeed?, timeout: Duration?) -> ChunkReceiver {
        let json: [UInt8]
        do {
            json = try HostCoding.encode(params, for: what)
        } catch {
            let receiver = ChunkReceiver(grant: { _ in }, giveUp: {})
            receiver.finish(.failure(error))
            return receiver
        }
        return startStream(target, method, params: json, input: input, timeout: timeout)
    }
}
