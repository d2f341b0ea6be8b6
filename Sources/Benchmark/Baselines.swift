import Foundation
import IPC
import PluginProtocol

/// Raw socketpair echoes of one length-prefixed frame, the floor any framed RPC over Unix sockets
/// sits on: one hop (client ↔ echo) and two hops (client ↔ relay ↔ echo, the shape of
/// CLI → supervisor → worker). Each peer is a thread blocked in read, as the worker is.
enum Baselines {
    static func pair() -> (Int32, Int32) {
        var fds: [Int32] = [0, 0]
        socketpair(AF_UNIX, Int32(SOCK_STREAM.rawValue), 0, &fds)
        return (fds[0], fds[1])
    }

    /// Reads frames from `input` and writes each to `output` until EOF.
    static func pump(_ input: BlockingConnection, _ output: BlockingConnection) {
        while let ok = try? input.receive({ body in (try? output.sendBody(body)) != nil }), ok {}
    }

    struct Echo {
        let client: BlockingConnection
        var threads: [Thread] = []

        /// hops = 1: client ↔ echo. hops = 2: client ↔ relay ↔ echo.
        init(hops: Int) {
            let (c, s) = pair()
            client = BlockingConnection(fd: c)
            let server = BlockingConnection(fd: s)
            if hops == 1 {
                threads.append(Thread { pump(server, server) })
            } else {
                let (r, e) = pair()
                let relayOut = BlockingConnection(fd: r)
                let echo = BlockingConnection(fd: e)
                threads.append(Thread { pump(server, relayOut) })
                threads.append(Thread { pump(relayOut, server) })
                threads.append(Thread { pump(echo, echo) })
            }
            threads.forEach { $0.start() }
        }

        func stop() { client.shutdown() }
    }

    /// JSON encode + decode of the call message alone, with Foundation's coders, in µs per message.
    static func jsonCost(iterations: Int) -> Double {
        struct Call: Codable { var type: String; var id: UInt64; var target: String; var method: String; var params: [String: Int] }
        let encoder = JSONEncoder()
        let decoder = JSONDecoder()
        var call = Call(type: "call", id: 1, target: "bench.callee", method: "ping", params: ["n": 1])
        let t0 = now()
        for i in 0..<iterations {
            call.id = UInt64(i)
            let data = try! encoder.encode(call)
            _ = try! decoder.decode(Call.self, from: data)
        }
        return Double(now() - t0) / Double(iterations) / 1000
    }
}
