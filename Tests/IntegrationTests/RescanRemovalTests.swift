import Foundation
import Synchronization
import Testing

/// A blocking command on a thread of its own: a test's tasks share two threads here, and two
/// commands blocked in them at once would wait for each other.
final class OnItsOwnThread<Value: Sendable>: Sendable {
    private let result = Mutex<Result<Value, any Error>?>(nil)

    init(_ work: @escaping @Sendable () throws -> Value) {
        Thread.detachNewThread { [self] in
            let outcome = Result { try work() }
            result.withLock { $0 = outcome }
        }
    }

    /// Its value, once the command has ended (at most `timeout` seconds from now).
    func value(timeout: TimeInterval = 60) throws -> Value {
        let deadline = Date().addingTimeInterval(timeout)
        while Date() < deadline {
            if let outcome = result.withLock({ $0 }) { return try outcome.get() }
            usleep(10_000)
        }
        throw HarnessError("a command run beside the test did not end in \(timeout) s")
    }
}

/// A plugin's folder removed and put back while the stop of its removal is under way
/// (docs/operations.md, reload): the plugin comes back once that stop has ended.
@Suite(.serialized, .timeLimit(.minutes(3)))
struct RescanRemovalTests {
    /// Takes `bundle` out of the plugin folders (its folder stays, so a worker still reads its files)
    /// or puts it back.
    static func hide(_ bundle: String) throws { try FileManager.default.moveItem(atPath: bundle + "/plugin.json", toPath: bundle + "/plugin.json.aside") }
    static func putBack(_ bundle: String) throws { try FileManager.default.moveItem(atPath: bundle + "/plugin.json.aside", toPath: bundle + "/plugin.json") }

    @Test("a plugin put back while its removal stops it runs again after that stop, and a call that waited meanwhile is answered by it")
    func putBackWhileBeingRemoved() throws {
        let w = try TestWorld()
        let back = try w.bundle("rr.back")
        try w.bundle("rr.other")
        // Its goodbye takes 1.5 s: the removal's stop is under way for that long.
        try "1500".write(toFile: back + "/terminate-delay-ms", atomically: true, encoding: .utf8)
        let sv = try RunningSupervisor(w)
        try Self.hide(back)
        let first = OnItsOwnThread { try sv.cli("reload") }
        try sv.waitUntil("rr.back to be told willTerminate") { FileManager.default.fileExists(atPath: w.home + "/data/rr.back/terminating") }
        // A call while it drains (sent before its folder is back) waits in its queue.
        let waiting = try rawControl(sv.socket)
        defer { waiting.close() }
        try waiting.sendFrame(callFrame(id: 7, target: "rr.back", method: "ping"))
        // Its folder is the rescan's until that stop ends: a restart (as an update or an uninstall) is refused.
        let restart = try sv.cli("restart", "rr.back")
        #expect(restart.code != 0 && restart.err.contains("rr.back is being stopped for its removal from the plugin folders"), "\(restart.err)")
        try Self.putBack(back)
        let second = try sv.cli("reload")
        #expect(second.code == 0 && second.out.contains(#""new":1"#) && second.out.contains(#""removed":0"#), "\(second.out) \(second.err)")
        let one = try first.value()
        #expect(one.code == 0 && one.out.contains(#""removed":1"#), "\(one.out) \(one.err)")
        // The second reload is answered once it runs again.
        let p = try sv.plugin("rr.back")
        #expect(p.state == "running" && p.restarts == 0, "\(p.state), restarts \(p.restarts)")
        let answer = String(decoding: try #require(try waiting.receiveFrame()), as: UTF8.self)
        #expect(answer.contains(#""id":7"#) && answer.contains(#""result":1"#), "\(answer)")
        #expect(try sv.call("rr.back", "ping", as: Int.self) == 1)
        // Later reloads leave it be.
        let third = try sv.cli("reload")
        #expect(third.code == 0 && third.out.contains(#""new":0"#) && third.out.contains(#""removed":0"#), "\(third.out) \(third.err)")
        #expect(try sv.status().map(\.identifier).sorted() == ["rr.back", "rr.other"])
    }

    @Test("a plugin put back and taken away again while its removal stops it is forgotten after that stop, and counted removed once")
    func putBackThenGoneAgain() throws {
        let w = try TestWorld()
        let back = try w.bundle("rr.again")
        try w.bundle("rr.stays")
        try "1500".write(toFile: back + "/terminate-delay-ms", atomically: true, encoding: .utf8)
        let sv = try RunningSupervisor(w)
        try Self.hide(back)
        let first = OnItsOwnThread { try sv.cli("reload") }
        try sv.waitUntil("rr.again to be told willTerminate") { FileManager.default.fileExists(atPath: w.home + "/data/rr.again/terminating") }
        try Self.putBack(back)
        let second = OnItsOwnThread { try sv.cli("reload") }
        try sv.waitUntil("the second reload to find it") { sv.log.contains("rr.again is back in the plugin folders") }
        try Self.hide(back)
        let third = try sv.cli("reload")
        #expect(third.code == 0 && third.out.contains(#""new":0"#) && third.out.contains(#""removed":1"#), "\(third.out) \(third.err)")
        for answer in [try first.value(), try second.value()] { #expect(answer.code == 0, "\(answer.out) \(answer.err)") }
        #expect(try sv.status().map(\.identifier) == ["rr.stays"])
        let call = try sv.cli("call", "rr.again", "ping")
        #expect(call.code != 0 && call.err.contains("no plugin rr.again is installed"), "\(call.code) \(call.out) \(call.err)")
    }
}
