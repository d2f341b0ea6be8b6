import NIOCore
import PluginProtocol
import Protocol
import SupervisorCore

/// Answers made by the supervisor itself (errors, results, progress), to whoever asked: a control
/// client, a plugin, the embedding program or the supervisor's own code. Every component answers
/// through these, none through another component.
extension Outbox {
    /// Answers `origin` with an error made by the supervisor.
    func answer(_ origin: ReplyOrigin, error: ErrorBody) {
        switch origin {
        case .client(let connection, let id):
            connection.answered()
            connection.inFlight[id] = nil
            connection.waitingStreams[id] = nil
            guard !connection.closed else { return }
            write(errorFrame(id: id, error, for: connection.channel), to: connection.channel)
        case .plugin(let caller, let id):
            caller.outgoing.remove(id)
            guard let channel = caller.channel else { return }
            write(errorFrame(id: id, error, for: channel), to: channel)
        case .host(let request):
            request.settle(.failure(error))
        case .local(let done):
            done(.failure(error))
        }
    }

    /// Answers a CLI request with a result made by the supervisor (`make` encodes it).
    func respond(_ origin: ReplyOrigin, _ make: () throws -> [UInt8]) {
        do {
            let result = try make()
            if case .host(let request) = origin { return request.settle(.success(result)) }
            guard case .client(let connection, let id) = origin else { return }
            connection.answered()
            guard !connection.closed else { return }
            var frame = encoder(.reply, for: connection.channel, capacity: result.count)
            frame.uint("id", id)
            frame.raw("result", result)
            write(frame.finish(), to: connection.channel)
        } catch {
            answer(origin, error: ErrorBody(.badRequest, "\(error)"))
        }
    }

    func errorFrame(id: UInt64, _ error: ErrorBody, for channel: Channel) -> ByteBuffer {
        var frame = encoder(.reply, for: channel, capacity: error.message.utf8.count + 32)
        frame.uint("id", id)
        frame.error(code: error.code, error.message, started: error.started)
        return frame.finish()
    }

    /// Sends a progress frame to a waiting CLI (long requests: installs, updates).
    func sendProgress(_ origin: ReplyOrigin, stage: String, done: Int64, total: Int64, message: String? = nil) {
        if case .host(let request) = origin {
            request.progress?(ProgressReport(stage: stage, done: max(0, done), total: max(0, total), message: message))
            return
        }
        guard case .client(let connection, let id) = origin, !connection.closed else { return }
        var frame = encoder(.progress, for: connection.channel)
        frame.uint("id", id)
        frame.string("stage", stage)
        frame.uint("done", UInt64(max(0, done)))
        frame.uint("total", UInt64(max(0, total)))
        if let message { frame.string("message", message) }
        write(frame.finish(), to: connection.channel)
    }
}
