import Logging
import NIOCore
import NIOHTTP1
import NIOPosix
import ServiceLifecycle

/// A small HTTP/1.1 server on SwiftNIO (which PluginHost brings already, so the program builds in
/// seconds), as a swift-service-lifecycle `Service`: on a graceful shutdown it stops accepting,
/// lets each request in progress get its answer, closes idle connections, and returns. A program
/// with a web framework (Hummingbird, Vapor) puts its application in the `ServiceGroup` instead;
/// the PluginHost side does not change.
struct HTTPServer: Service {
    /// What a request is answered with.
    enum Answer: Sendable {
        case text(HTTPResponseStatus, String)
        case json(HTTPResponseStatus, [UInt8])
    }

    let host: String
    let port: Int
    let logger: Logger
    /// Answers a request (its method and its URI, path and query).
    let handler: @Sendable (HTTPMethod, String) async throws -> Answer

    private typealias Connection = NIOAsyncChannel<HTTPServerRequestPart, HTTPServerResponsePart>

    func run() async throws {
        let listener = try await ServerBootstrap(group: MultiThreadedEventLoopGroup.singleton)
            .serverChannelOption(.socketOption(.so_reuseaddr), value: 1)
            .bind(host: host, port: port) { channel in
                channel.eventLoop.makeCompletedFuture {
                    try channel.pipeline.syncOperations.configureHTTPServerPipeline(withErrorHandling: true)
                    return try Connection(wrappingChannelSynchronously: channel)
                }
            }
        logger.info("listening on http://\(host):\(port)")
        // The connections' tasks inherit the graceful shutdown: each ends after its current request.
        try await withThrowingDiscardingTaskGroup { connections in
            try await listener.executeThenClose { accepted in
                for try await connection in accepted.cancelOnGracefulShutdown() {
                    connections.addTask { await serve(connection) }
                }
            }
        }
        logger.info("HTTP server stopped")
    }

    private func serve(_ connection: Connection) async {
        do {
            try await connection.executeThenClose { inbound, outbound in
                var head: HTTPRequestHead?
                for try await part in inbound.cancelOnGracefulShutdown() {
                    switch part {
                    case .head(let request): head = request
                    case .body: continue
                    case .end:
                        guard let request = head else { continue }
                        head = nil
                        let answer: Answer
                        do { answer = try await handler(request.method, request.uri) } catch {
                            answer = .text(.internalServerError, "\(error)\n")
                        }
                        try await write(answer, keepAlive: request.isKeepAlive, to: outbound)
                        if !request.isKeepAlive { return }
                    }
                }
            }
        } catch {
            logger.debug("connection ended: \(error)")
        }
    }

    private func write(_ answer: Answer, keepAlive: Bool, to outbound: NIOAsyncChannelOutboundWriter<HTTPServerResponsePart>) async throws {
        let (status, type, body): (HTTPResponseStatus, String, [UInt8]) = switch answer {
        case .text(let status, let text): (status, "text/plain; charset=utf-8", Array(text.utf8))
        case .json(let status, let json): (status, "application/json", json)
        }
        var headers = HTTPHeaders([("Content-Type", type), ("Content-Length", "\(body.count)")])
        if !keepAlive { headers.add(name: "Connection", value: "close") }
        try await outbound.write(.head(HTTPResponseHead(version: .http1_1, status: status, headers: headers)))
        try await outbound.write(.body(.byteBuffer(ByteBuffer(bytes: body))))
        try await outbound.write(.end(nil))
    }
}
