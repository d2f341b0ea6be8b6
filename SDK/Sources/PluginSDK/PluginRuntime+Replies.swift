import PluginProtocol

/// Answers to calls made to this plugin, and its log lines: frames it sends without waiting.
extension PluginRuntime {
    func reply(_ id: UInt64, result: [UInt8]) {
        var b = FrameBuilder(kind: .reply, capacity: result.count + 32)
        b.uint("id", id)
        b.raw("result", result)
        _ = send(b.finish())
    }

    /// Answers call `id` with the result `write` appends, in this thread's reusable frame buffer
    /// (no allocation once it has grown); what `write` throws is the answer instead.
    func replyWriting(_ id: UInt64, _ write: (inout [UInt8]) throws -> Void) {
        let scratch = ScratchFrame.current
        var b = FrameBuilder(kind: .reply, into: scratch.take())
        b.uint("id", id)
        do {
            try b.value("result", write)
        } catch {
            return reply(id, error: error)
        }
        var frame = b.finish()
        _ = send(frame)
        scratch.give(&frame)
    }

    func reply(_ id: UInt64, error: any Error) {
        var b = FrameBuilder(kind: .reply)
        b.uint("id", id)
        if let e = error as? PluginError {
            b.error(code: e.code, e.message)
        } else {
            b.error(.pluginError, String(describing: error))
        }
        _ = send(b.finish())
    }

    func log(_ level: LogLevel, _ message: String, metadata: [String: String]? = nil) {
        guard let frame = try? ProtocolJSON.frame(LogMessage(level: level.rawValue, message: message, metadata: metadata)) else { return }
        _ = send(frame)
    }
}
