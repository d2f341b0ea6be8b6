/// The answer to `upgrade` (docs/protocol.md, "Upgrading in place"), from the binary that took
/// over: the versions, the supervisor's pid (the same as before), the workers it took over, and
/// the pause: from the moment the previous binary stopped reading its sockets to this answer.
public struct UpgradeOutcome: Codable, Sendable, Equatable {
    public var from: String
    public var to: String
    public var pid: Int32
    public var workers: Int
    public var pauseMs: Double

    public init(from: String, to: String, pid: Int32, workers: Int, pauseMs: Double) {
        self.from = from
        self.to = to
        self.pid = pid
        self.workers = workers
        self.pauseMs = pauseMs
    }
}
