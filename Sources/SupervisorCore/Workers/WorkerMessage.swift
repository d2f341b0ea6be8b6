import PluginProtocol

/// What a worker said (SPEC §3), read from one frame's body and checked against what a worker may
/// say at that point: pure, tested without a worker (`WorkerMessageTests`). `Router.workerFrame`
/// (WorkerInbound.swift) acts on it; anything a worker may not say is a `violation`, for which that
/// worker alone is killed.
package enum WorkerMessage: Equatable {
    case hello(HelloMessage)
    /// An answer to request `id` of the supervisor's.
    case reply(id: UInt64)
    case pong(id: UInt64?)
    /// A call or an open its plugin makes to another plugin (or to the host).
    case request(MessageKind)
    /// A stream's chunk or credit (docs/protocol.md "Streams"), either role.
    case stream(MessageKind)
    /// Its plugin gives up a call it made (`id`: the plugin's): a stream it stops reading.
    case cancel(id: UInt64)
    case log
    /// Its peer links' call counts (docs/protocol.md "Peer links").
    case linkCalls
    /// It is ending itself, and says why (nil: the notice did not decode; its exit code decides).
    case exit(ExitNotice?)
    /// Something a worker may not say: it is killed, with this as the reason.
    case violation(String)

    /// Reads one frame's body from the worker of `plugin`; `saidHello`: it has said hello already.
    /// The envelope (the routing fields) comes with it for the messages that are routed on.
    package static func read(_ bytes: UnsafeRawBufferPointer, maxDepth: Int, saidHello: Bool, plugin: String) -> (WorkerMessage, Envelope?) {
        let env: Envelope
        do { env = try Envelope.parse(bytes, maxDepth: maxDepth) } catch {
            return (.violation("invalid frame: \(error)"), nil)
        }
        guard let kind = env.kind else {
            return (.violation(env.unknownType(in: bytes)), env)
        }
        if env.badID { return (.violation("\(kind.rawValue) with an id that is not an unsigned integer"), env) }
        if !saidHello, kind != .hello, kind != .exit, kind != .log {
            return (.violation("\(kind.rawValue) before hello"), env)
        }
        // Bytes ride only on a call's params, an answer, and a stream's chunk (docs/protocol.md
        // "Bytes"; a chunk's inline only): anything else with attachments could leave descriptors
        // on the channel for the next message to be read with.
        if env.attachments != nil || env.tail != nil, ![.reply, .call, .open, .chunk].contains(kind) {
            return (.violation("a \(kind.rawValue) message with attachments"), env)
        }
        if kind == .chunk, let why = StreamFrames.bytesProblem(of: env, in: bytes) { return (.violation(why), env) }
        switch kind {
        case .hello:
            guard !saidHello else { return (.violation("a second hello"), env) }
            let hello: HelloMessage
            do { hello = try ProtocolJSON.decode(HelloMessage.self, from: bytes) } catch {
                return (.violation("malformed hello: \(error)"), env)
            }
            guard hello.protocol == Frame.protocolVersion else {
                return (.violation("hello speaks protocol \(hello.protocol), this supervisor speaks \(Frame.protocolVersion)"), env)
            }
            guard hello.plugin == plugin else {
                return (.violation("hello names plugin \(hello.plugin), expected \(plugin)"), env)
            }
            if let why = helloBeyondBounds(hello) { return (.violation(why), env) }
            return (.hello(hello), env)
        case .reply:
            guard let id = env.id else { return (.violation("reply without an id"), env) }
            return (.reply(id: id), env)
        case .pong: return (.pong(id: env.id), env)
        case .call, .open: return (.request(kind), env)
        case .chunk, .credit:
            guard env.id != nil else { return (.violation("\(kind.rawValue) without an id"), env) }
            return (.stream(kind), env)
        case .cancel:
            guard let id = env.id else { return (.violation("cancel without an id"), env) }
            return (.cancel(id: id), env)
        case .log: return (.log, env)
        case .linkCalls: return (.linkCalls, env)
        case .exit: return (.exit(try? ProtocolJSON.decode(ExitNotice.self, from: bytes)), env)
        default: return (.violation("a worker may not send \(kind.rawValue)"), env)
        }
    }
}

extension WorkerMessage {
    /// The most a `hello` may list. A worker's own lists are a few dozen short lines (its 19
    /// layers, the few a host lacks, its timings); a `hello` is plugin code's to forge too (a
    /// library constructor runs before the worker's own is sent), and what it lists is logged and
    /// kept: beyond these it is a violation, not 100,000 warnings.
    package static let helloListLimit = 64
    package static let helloTextLimit = 512
    /// Methods a plugin declared idempotent as it was created (SPEC §15): its worker takes no more.
    package static let idempotentLimit = 1_024

    /// Why `hello` lists more than a worker may, if it does.
    static func helloBeyondBounds(_ hello: HelloMessage) -> String? {
        let lists: [(String, [String], Int)] = [("sandbox", hello.sandbox ?? [], helloListLimit),
                                                ("sandboxMissing", hello.sandboxMissing ?? [], helloListLimit),
                                                ("idempotent", hello.idempotent ?? [], idempotentLimit),
                                                ("timings", Array((hello.timings ?? [:]).keys), helloListLimit)]
        for (field, list, limit) in lists {
            if list.count > limit { return "hello lists \(list.count) entries in \(field); a worker may list \(limit)" }
            if let long = list.first(where: { $0.utf8.count > helloTextLimit }) {
                return "hello has an entry of \(long.utf8.count) bytes in \(field); one may have \(helloTextLimit)"
            }
        }
        return nil
    }
}
