/// The `type` of a message. The first block is SPEC §3; the rest are this implementation's
/// extensions (documented in docs/protocol.md): `exit` (worker → supervisor, the reason it is about to
/// end itself) and the control requests a CLI sends to the supervisor.
public enum MessageKind: String, Sendable, Codable, CaseIterable {
    case hello, event, call, open, reply, log, cancel, ping, pong
    case exit
    case status, send, restart, stop
    case install, update, uninstall
    /// `reload` (SIGHUP's verb) and `metrics` (the Prometheus text, as a string result).
    case reload, metrics
    /// Debug builds only: holds the supervisor's event loop for `timeoutMs` (tests of the systemd
    /// watchdog). A release build answers badRequest.
    case debugWedge
    /// Supervisor → CLI, before the reply to a long request: `id`, `stage`, `done`, `total`, `message`.
    case progress
    /// Worker → supervisor: the calls a caller's worker sent over its peer link to `target` since
    /// its last report, for the callee's metrics (`CallHop.LinkCalls`, docs/protocol.md "Peer links").
    case linkCalls
    /// Supervisor → worker: take a peer link back (`UnlinkMessage`).
    case unlink
    /// Supervisor → a standby worker (`WorkerSpec.standby`): load the plugin now. The whole frame
    /// body is `Frame.loadBody`.
    case load
    /// Client → supervisor: follow the host events (optional `target`: one plugin's); answered, then
    /// each event arrives as a `hostEvent` frame with the request's id (docs/protocol.md, "Host programs").
    case events
    /// Client → supervisor: provide the host method `method`; plugins' `@host` calls of it then come
    /// to this connection as `call` frames, which the client answers with `reply`.
    case provide
    /// Client → supervisor: a direct link to `target`'s worker (`LinkGrant` in the answer; docs/protocol.md
    /// "Direct links for clients").
    case link
    /// Supervisor → client: one host event (`HostEvent`'s members beside `type` and `id`).
    case hostEvent
    /// One element of a stream (SPEC §13, docs/protocol.md "Streams"): `id` of the call, `seq` from
    /// 0, `data` (any JSON). From the callee, an element of the answer to a call made with
    /// `"stream": true`; with `"input": true`, from the caller, an element of the call's input
    /// (`"end": true` and no `data` ends the input).
    case chunk
    /// Credit for `n` more chunks of the stream of call `id`: from the caller for the answer's
    /// chunks; with `"input": true`, from the callee for the input's.
    case credit
    /// Client → supervisor: replace the supervisor's binary in place (SPEC §14), optional
    /// `params` `{"binary": "<absolute path>"}` (default: the path the running binary was started
    /// from); answered by whichever binary carries on (docs/protocol.md, "Upgrading in place").
    case upgrade
    /// Supervisor → worker, after an upgrade in place: `id`; a worker whose `hello` said
    /// `takenPageKept` sends its taken page's descriptor on its payload channel, then answers
    /// `{"type":"reply","id":N,"result":true}` (`false`: it has none to send).
    case takenPage
    /// Plugin → its worker, while the plugin is created (before `hello`): `methods`, the names of
    /// its methods that may run twice (SPEC §15). The worker takes it and lists them in `hello`'s
    /// `idempotent`; it never reaches the supervisor.
    case idempotent
}

extension MessageKind {
    /// A frame's body up to its first member's end, `{"type":"<kind>"`, as constant bytes: every
    /// frame built starts with it (`FrameEncoder.init`), without escaping the name each time.
    @inlinable
    public var openingMembers: StaticString {
        switch self {
        case .hello: #"{"type":"hello""#
        case .event: #"{"type":"event""#
        case .call: #"{"type":"call""#
        case .open: #"{"type":"open""#
        case .reply: #"{"type":"reply""#
        case .log: #"{"type":"log""#
        case .cancel: #"{"type":"cancel""#
        case .ping: #"{"type":"ping""#
        case .pong: #"{"type":"pong""#
        case .exit: #"{"type":"exit""#
        case .status: #"{"type":"status""#
        case .send: #"{"type":"send""#
        case .restart: #"{"type":"restart""#
        case .stop: #"{"type":"stop""#
        case .install: #"{"type":"install""#
        case .update: #"{"type":"update""#
        case .uninstall: #"{"type":"uninstall""#
        case .reload: #"{"type":"reload""#
        case .metrics: #"{"type":"metrics""#
        case .debugWedge: #"{"type":"debugWedge""#
        case .progress: #"{"type":"progress""#
        case .linkCalls: #"{"type":"linkCalls""#
        case .idempotent: #"{"type":"idempotent""#
        case .unlink: #"{"type":"unlink""#
        case .load: #"{"type":"load""#
        case .events: #"{"type":"events""#
        case .provide: #"{"type":"provide""#
        case .link: #"{"type":"link""#
        case .hostEvent: #"{"type":"hostEvent""#
        case .chunk: #"{"type":"chunk""#
        case .credit: #"{"type":"credit""#
        case .upgrade: #"{"type":"upgrade""#
        case .takenPage: #"{"type":"takenPage""#
        }
    }
}

/// Lifecycle event names (SPEC §3).
public enum EventName: String, Sendable, Codable, CaseIterable {
    case startup, launch, willTerminate, memoryWarning, background, foreground
    case resourceUpdated, dependencyRestarted
}

/// Error codes carried in a reply's `error.code` (SPEC §3).
public enum ErrorCode: String, Sendable, Codable, CaseIterable {
    case notFound, unavailable, timeout, denied, badRequest, pluginError, protocolViolation
}
