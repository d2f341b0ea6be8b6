import Logging
import NIOCore
import NIOHTTP1
import NIOPosix
import SupervisorCore

/// `metrics.listen` (SPEC §10): where `GET /metrics` is served. A port alone (`"9464"`) is loopback
/// (127.0.0.1); otherwise `host:port` with the host written out: an IPv4 or bracketed IPv6 address,
/// or `localhost`. So the endpoint leaves this machine only when a non-loopback address is written.
struct MetricsEndpoint: Equatable {
    var host: String
    var port: Int

    struct Invalid: Error { var reason: String }

    init(_ text: String) throws(Invalid) {
        // A port alone is loopback.
        let colon = text.lastIndex(of: ":")
        guard colon != nil || Int(text) != nil else {
            throw Invalid(reason: "'\(text)' is not a port or host:port (for example 9464 or 127.0.0.1:9464)")
        }
        var host = colon.map { String(text[..<$0]) } ?? "127.0.0.1"
        let portText = colon.map { text[text.index(after: $0)...] } ?? Substring(text)
        guard let port = Int(portText), (1...65535).contains(port) else {
            throw Invalid(reason: "'\(text)': the port must be 1 to 65535")
        }
        if host.hasPrefix("[") && host.hasSuffix("]") { host = String(host.dropFirst().dropLast()) }
        guard !host.isEmpty else {
            throw Invalid(reason: "'\(text)' names no address: write \(port) or 127.0.0.1:\(port) for this machine only, or the address of the interface to serve on")
        }
        guard host == "localhost" || (try? SocketAddress(ipAddress: host, port: port)) != nil else {
            throw Invalid(reason: "'\(text)': '\(host)' is not an IP address or localhost")
        }
        self.host = host
        self.port = port
    }
}

/// Serves the Prometheus text at `GET /metrics` over HTTP/1.1 (SwiftNIO's HTTP/1 codec) on the
/// supervisor's own event loop: a scrape reads the same state the loop owns, without a lock.
enum MetricsServer {
    /// Connections to the endpoint open at once, at most: past it, the one that has gone longest
    /// without a whole request is closed to make room (a scraper's, which asks at once, is not).
    static let connectionsMax = 64
    /// A connection that sends nothing for this long is closed (a scraper opens a new one); one
    /// that has not sent a whole request in this long either (a byte at a time keeps no slot).
    static let idleTimeout = TimeAmount.seconds(10)

    /// Binds `config.metricsListen` if set; nil when not. A bind failure stops the start with the reason.
    /// `adopting`: the listener the previous binary handed over in an upgrade (bound already).
    static func start(config: SupervisorConfig, logger: Logger, engine: Handed<Engine>, adopting: Int32? = nil,
                      wait: (EventLoopFuture<Channel>) throws -> Channel = { try $0.wait() }) throws(SupervisorError) -> Channel? {
        guard let listen = config.metricsListen else { return nil }
        let endpoint: MetricsEndpoint
        do { endpoint = try MetricsEndpoint(listen) } catch {
            throw .config(file: "metrics.listen", reason: error.reason)
        }
        let bootstrap = ServerBootstrap(group: engine.eventLoop)
            .serverChannelOption(ChannelOptions.socketOption(.so_reuseaddr), value: 1)
            .serverChannelInitializer { AcceptBackoff.install(on: $0, logger: logger, listener: "the metrics endpoint") }
            .childChannelInitializer { channel in
                channel.eventLoop.makeCompletedFuture {
                    // Scrapers are few: past `connectionsMax` open at once the connection that has
                    // gone longest without a whole request is closed, and one that sends no whole
                    // request for `idleTimeout` is closed, so that connections held open cannot take
                    // the descriptors the control socket and the workers need, nor keep a scraper
                    // (a liveness probe) out.
                    let shared = engine.value.shared
                    if shared.metricsConnections.count >= connectionsMax,
                       let oldest = shared.metricsConnections.min(by: { $0.value.since < $1.value.since }) {
                        shared.metricsConnections[oldest.key] = nil
                        oldest.value.channel.close(promise: nil)
                    }
                    let key = ObjectIdentifier(channel)
                    shared.metricsConnections[key] = (channel, .now())
                    channel.closeFuture.whenComplete { _ in engine.value.shared.metricsConnections[key] = nil }
                    try channel.pipeline.syncOperations.configureHTTPServerPipeline(withErrorHandling: true)
                    try channel.pipeline.syncOperations.addHandler(MetricsHandler(shared))
                }
            }
        if let adopting {
            do { return try wait(bootstrap.withBoundSocket(adopting)) } catch {
                throw .config(file: "metrics.listen", reason: "cannot take over the listener of \(listen) (descriptor \(adopting)): \(error)")
            }
        }
        do {
            let channel = try wait(bootstrap.bind(host: endpoint.host, port: endpoint.port))
            let shown = endpoint.host.contains(":") ? "[\(endpoint.host)]:\(endpoint.port)" : "\(endpoint.host):\(endpoint.port)"
            logger.info("metrics: GET http://\(shown)/metrics")
            return channel
        } catch let error as IOError {
            let privileged = error.errnoCode == EACCES && endpoint.port < 1024 ? " (a port under 1024 needs root or CAP_NET_BIND_SERVICE)" : ""
            throw .config(file: "metrics.listen", reason: "cannot listen on \(listen): \(String(cString: strerror(error.errnoCode)))\(privileged)")
        } catch {
            throw .config(file: "metrics.listen", reason: "cannot listen on \(listen): \(error)")
        }
    }
}

/// One HTTP connection of a scraper.
final class MetricsHandler: ChannelInboundHandler {
    typealias InboundIn = HTTPServerRequestPart
    typealias OutboundOut = HTTPServerResponsePart

    let shared: Shared
    private var request: HTTPRequestHead?
    /// A whole request whose answer waits for room: a client that pipelines requests and reads
    /// no answers is answered no faster than it reads (the pipeline handler holds the requests
    /// after this one, and stops reading).
    private var waiting: HTTPRequestHead?
    /// Closes a connection that has not sent a whole request within `idleTimeout`.
    private var deadline: Scheduled<Void>?

    init(_ shared: Shared) {
        self.shared = shared
    }

    func handlerAdded(context: ChannelHandlerContext) { armDeadline(context) }

    func handlerRemoved(context: ChannelHandlerContext) { deadline?.cancel() }

    private func armDeadline(_ context: ChannelHandlerContext) {
        deadline?.cancel()
        let channel = context.channel
        deadline = context.eventLoop.assumeIsolated().scheduleTask(in: MetricsServer.idleTimeout) { channel.close(promise: nil) }
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        switch unwrapInboundIn(data) {
        case .head(let head): request = head
        case .body: break
        case .end:
            guard let head = request else { return }
            request = nil
            armDeadline(context)
            shared.metricsConnections[ObjectIdentifier(context.channel)]?.since = .now()
            guard context.channel.isWritable else { return waiting = head }
            respond(context, head)
        }
    }

    func channelWritabilityChanged(context: ChannelHandlerContext) {
        if context.channel.isWritable, let head = waiting {
            waiting = nil
            respond(context, head)
        }
        context.fireChannelWritabilityChanged()
    }

    private func respond(_ context: ChannelHandlerContext, _ head: HTTPRequestHead) {
        var target = Substring(head.uri)
        // The absolute form (`GET http://host:port/metrics`), which an HTTP/1.1 server must take.
        if let scheme = target.firstRange(of: "://") {
            let rest = target[scheme.upperBound...]
            target = rest.firstIndex(of: "/").map { rest[$0...] } ?? "/"
        }
        let path = target.split(separator: "?", maxSplits: 1).first.map(String.init) ?? String(target)
        var headers = HTTPHeaders()
        let status: HTTPResponseStatus
        var body: [UInt8]
        if path != "/metrics" {
            status = .notFound
            body = Array("not found: the metrics are at /metrics\n".utf8)
            headers.add(name: "Content-Type", value: "text/plain; charset=utf-8")
        } else if head.method != .GET && head.method != .HEAD {
            status = .methodNotAllowed
            body = Array("only GET\n".utf8)
            headers.add(name: "Allow", value: "GET, HEAD")
            headers.add(name: "Content-Type", value: "text/plain; charset=utf-8")
        } else {
            status = .ok
            body = shared.metrics.exposition()
            headers.add(name: "Content-Type", value: "text/plain; version=0.0.4; charset=utf-8")
        }
        headers.add(name: "Content-Length", value: "\(body.count)")
        if head.method == .HEAD { body = [] }
        let keepAlive = head.isKeepAlive
        if !keepAlive { headers.add(name: "Connection", value: "close") }
        context.write(wrapOutboundOut(.head(HTTPResponseHead(version: head.version, status: status, headers: headers))), promise: nil)
        if !body.isEmpty {
            context.write(wrapOutboundOut(.body(.byteBuffer(context.channel.allocator.buffer(bytes: body)))), promise: nil)
        }
        let done = context.eventLoop.makePromise(of: Void.self)
        context.writeAndFlush(wrapOutboundOut(.end(nil)), promise: done)
        if !keepAlive {
            let channel = context.channel
            done.futureResult.whenComplete { _ in channel.close(promise: nil) }
        }
    }

    func errorCaught(context: ChannelHandlerContext, error: any Error) {
        context.close(promise: nil)
    }
}
