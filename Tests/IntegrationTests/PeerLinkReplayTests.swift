import Foundation
import PluginProtocol
import Protocol
import SupervisorClient
import Testing

/// SPEC §15 over a peer link (docs/protocol.md "Calls that survive a crash"): the calls a plugin
/// has in flight on its link to a dependency whose worker dies go back to the caller's worker,
/// which sends them through the supervisor naming where they were (`afterLink`); the supervisor
/// read the callee's mark for the link before the caller's worker could see the link end, and
/// replays what the callee's plugin never had, retries what is idempotent, and fails the rest
/// with `started: true`. Real workers, killed with SIGKILL.
@Suite(.serialized, .timeLimit(.minutes(4)))
struct PeerLinkReplayTests {
    /// A C plugin that puts calls on its link at once: `fan` ({"target", "count", "base", "block"})
    /// sends `block` (id 4999, when asked) and `count` calls of `tally` (ids 5000..., params
    /// base + i) to `target` with `host->send`, one after another, then (`rows`) a stream call of
    /// `rows` (id 5999, never granted credit), and only then answers `count`: once it has
    /// answered, every call is on the link. `answers` lists what came back, as "<id> ok <result>",
    /// "<id> <code>[ started]" or "5999 rows <chunks seen>[ out of order]"; `rowsSeen` counts
    /// the stream's chunks so far.
    static let cFanner = #"""
    #define _GNU_SOURCE
    #include <pthread.h>
    #include "sp_plugin.h"
    #include "fixture_json.h"
    static const sp_host *host;
    static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
    static char answers[16384];
    static size_t used = 0;
    /* The chunks of the stream call 5999 (`rows`) seen so far, and how many came out of order. */
    static unsigned long long rows_seen = 0, rows_bad = 0;
    static void say(const char *frame, int n) { host->send(host->ctx, (const uint8_t *)frame, (size_t)n); }
    static void receive(void *ctx, const uint8_t *bytes, size_t len) {
        (void)ctx;
        const char *json = (const char *)bytes;
        unsigned long long id = 0;
        find_uint(json, len, "id", &id);
        char frame[20480];
        if (memmem(json, len, "\"type\":\"chunk\"", 14) && id == 5999) {
            unsigned long long seq = 0;
            pthread_mutex_lock(&lock);
            if (!find_uint(json, len, "seq", &seq) || seq != rows_seen) rows_bad++;
            rows_seen++;
            pthread_mutex_unlock(&lock);
        } else if (memmem(json, len, "\"type\":\"reply\"", 14)) {
            char code[64] = "";
            unsigned long long result = 0;
            pthread_mutex_lock(&lock);
            if (id == 5999 && memmem(json, len, "\"result\":", 9)) {
                used += (size_t)snprintf(answers + used, sizeof answers - used, "%s\"5999 rows %llu%s\"", used ? "," : "", rows_seen, rows_bad ? " out of order" : "");
            } else if (find_uint(json, len, "result", &result)) {
                used += (size_t)snprintf(answers + used, sizeof answers - used, "%s\"%llu ok %llu\"", used ? "," : "", id, result);
            } else {
                find_string(json, len, "code", code, sizeof code);
                int started = memmem(json, len, "\"started\":true", 14) != NULL;
                used += (size_t)snprintf(answers + used, sizeof answers - used, "%s\"%llu %s%s\"", used ? "," : "", id, code, started ? " started" : "");
            }
            pthread_mutex_unlock(&lock);
        } else if (memmem(json, len, "\"type\":\"call\"", 13) && memmem(json, len, "\"method\":\"fan\"", 14)) {
            /* The fields of its params (the call itself has a "target" too). */
            const char *params = memmem(json, len, "\"params\":", 9);
            size_t rest = params ? len - (size_t)(params - json) : 0;
            char target[128] = "";
            unsigned long long count = 0, base = 0;
            if (params) {
                find_string(params, rest, "target", target, sizeof target);
                find_uint(params, rest, "count", &count);
                find_uint(params, rest, "base", &base);
            }
            /* A call sent as if again after a link ended, "afterLink" forged by the plugin: 1 is
               malformed, 2 and 3 name a link it never held. */
            unsigned long long forge = 0;
            if (params && find_uint(params, rest, "forge", &forge) && forge >= 1 && forge <= 3) {
                static const char *after[] = {"", "\"x\"", "{\"link\":424242,\"id\":1}", "{\"link\":424242,\"id\":1}"};
                say(frame, snprintf(frame, sizeof frame, "{\"type\":\"call\",\"id\":%llu,\"target\":\"%s\",\"method\":\"tally\",\"params\":%llu,\"afterLink\":%s,\"timeoutMs\":30000}", 6000 + forge, target, base, after[forge]));
                say(frame, snprintf(frame, sizeof frame, "{\"type\":\"reply\",\"id\":%llu,\"result\":1}", id));
                return;
            }
            if (params && memmem(params, rest, "\"block\":true", 12)) {
                say(frame, snprintf(frame, sizeof frame, "{\"type\":\"call\",\"id\":4999,\"target\":\"%s\",\"method\":\"block\",\"params\":{\"ms\":60000},\"timeoutMs\":60000}", target));
            }
            for (unsigned long long i = 0; i < count; i++) {
                say(frame, snprintf(frame, sizeof frame, "{\"type\":\"call\",\"id\":%llu,\"target\":\"%s\",\"method\":\"tally\",\"params\":%llu,\"timeoutMs\":30000}", 5000 + i, target, base + i));
            }
            /* Then a stream call, `rows`, for which it never grants credit: 16 chunks at most. */
            unsigned long long rows = 0;
            if (params && find_uint(params, rest, "rows", &rows) && rows > 0) {
                pthread_mutex_lock(&lock);
                rows_seen = rows_bad = 0;
                pthread_mutex_unlock(&lock);
                say(frame, snprintf(frame, sizeof frame, "{\"type\":\"call\",\"id\":5999,\"target\":\"%s\",\"method\":\"rows\",\"params\":{\"count\":%llu},\"stream\":true,\"timeoutMs\":30000}", target, rows));
            }
            say(frame, snprintf(frame, sizeof frame, "{\"type\":\"reply\",\"id\":%llu,\"result\":%llu}", id, count));
        } else if (memmem(json, len, "\"type\":\"call\"", 13) && memmem(json, len, "\"method\":\"rowsSeen\"", 19)) {
            pthread_mutex_lock(&lock);
            int n = snprintf(frame, sizeof frame, "{\"type\":\"reply\",\"id\":%llu,\"result\":%llu}", id, rows_seen);
            pthread_mutex_unlock(&lock);
            say(frame, n);
        } else if (memmem(json, len, "\"type\":\"call\"", 13) && memmem(json, len, "\"method\":\"answers\"", 18)) {
            pthread_mutex_lock(&lock);
            int n = snprintf(frame, sizeof frame, "{\"type\":\"reply\",\"id\":%llu,\"result\":[%s]}", id, answers);
            used = 0;
            answers[0] = 0;
            pthread_mutex_unlock(&lock);
            say(frame, n);
        } else if (memmem(json, len, "\"type\":\"call\"", 13) || memmem(json, len, "\"type\":\"event\"", 14)) {
            say(frame, snprintf(frame, sizeof frame, "{\"type\":\"reply\",\"id\":%llu,\"result\":null}", id));
        }
    }
    static void destroy(void *ctx) { (void)ctx; }
    static const sp_plugin plugin = { SP_ABI_VERSION, NULL, receive, destroy };
    const sp_plugin *sp_plugin_create(const sp_host *h) { host = h; return &plugin; }
    """#

    /// `fan`'s params (`rows`: then a stream call of that many rows, id 5999).
    static func fan(_ target: String, count: Int, base: Int, block: Bool = false, rows: Int = 0) -> String {
        #"{"target":"\#(target)","count":\#(count),"base":\#(base),"block":\#(block),"rows":\#(rows)}"#
    }

    @Test("a plugin that forges afterLink on its own calls (malformed, or a link it never held): malformed is refused as badRequest; otherwise a call that is not idempotent fails with started and never runs, an idempotent one runs once; the plugin and its dependencies keep running")
    func forgedAfterLink() throws {
        let w = try TestWorld()
        try w.bundle("p.base")
        try w.bundle("p.safe", extra: ["idempotent": ["tally"]])
        try w.bundle("p.fanner", deps: [Dep("p.base"), Dep("p.safe")], library: try Build.cLibrary("fanner", source: Self.cFanner))
        // Every call through the supervisor (no link to take the forged ones past it).
        let sv = try RunningSupervisor(w, args: ["--config", try w.config(#"{"peerLinks": false}"#)])
        func forge(_ n: Int, _ target: String) throws -> String {
            #expect(try sv.call("p.fanner", "fan", #"{"target":"\#(target)","forge":\#(n),"base":7}"#, as: Int.self) == 1)
            var seen: [String] = []
            try sv.waitUntil("the forged call's answer") {
                seen += try sv.call("p.fanner", "answers", as: [String].self)
                return !seen.isEmpty
            }
            return seen.joined(separator: ", ")
        }
        #expect(try forge(1, "p.base") == "6001 badRequest")
        #expect(try forge(2, "p.base") == "6002 unavailable started")
        #expect(try forge(3, "p.safe") == "6003 ok 7")
        #expect(try CrashReplayTests.ran(sv, "p.base").isEmpty)
        #expect(try CrashReplayTests.ran(sv, "p.safe") == [7])
        for id in ["p.fanner", "p.base", "p.safe"] {
            #expect(try sv.plugin(id).state == "running" && sv.plugin(id).restarts == 0, "\(id)")
        }
        #expect(!sv.log.contains("protocolViolation"), "\(sv.log)")
    }

    @Test("over a peer link: the callee killed while 64 calls wait behind a slow one: each waiting call is answered by the next worker, once, in order; the slow one fails with started: true")
    func waitingCallsOverAPeerLink() throws {
        let w = try TestWorld()
        try w.bundle("p.base")
        try w.bundle("p.fanner", deps: [Dep("p.base")], library: try Build.cLibrary("fanner", source: Self.cFanner))
        let sv = try RunningSupervisor(w)
        try Self.linkFirst(sv)
        try Self.expectLinkCallsReplayed(w, sv)
    }

    @Test("over a peer link, a stream call: one its callee's plugin never started goes through the supervisor to the next worker, and its whole answer comes once, in order; one that had begun answering fails with started: true")
    func streamCallsOverAPeerLink() throws {
        let w = try TestWorld()
        try w.bundle("p.base")
        try w.bundle("p.fanner", deps: [Dep("p.base")], library: try Build.cLibrary("fanner", source: Self.cFanner))
        let sv = try RunningSupervisor(w)
        try Self.linkFirst(sv)
        func answers() throws -> [String] { try sv.call("p.fanner", "answers", as: [String].self) }
        // Behind `block`, unread by the callee's worker: never started.
        #expect(try sv.call("p.fanner", "fan", Self.fan("p.base", count: 4, base: 0, block: true, rows: 10), as: Int.self) == 4)
        try sv.waitUntil("the slow call to start") { FileManager.default.fileExists(atPath: w.home + "/data/p.base/blocking") }
        kill(try #require(try sv.plugin("p.base").pid), SIGKILL)
        var seen: [String] = []
        try sv.waitUntil("6 answers") {
            seen += try answers()
            return seen.count >= 6
        }
        #expect(Set(seen) == Set((0..<4).map { "\(5000 + $0) ok \($0)" } + ["4999 unavailable started", "5999 rows 10"]), "\(seen)")
        let metrics = try Prometheus(sv.cli("metrics").out)
        #expect(metrics["plugin_calls_replayed_total", ["plugin": "p.base"]] == 5, "the tallies and the stream")
        // Begun: the stream's first window came (16 chunks; the caller grants no more), then the
        // callee's worker is killed.
        try sv.waitUntil("a new link") {
            _ = try sv.call("p.fanner", "fan", Self.fan("p.base", count: 1, base: 2000), as: Int.self)
            return try sv.plugin("p.fanner").links == ["p.base"]
        }
        #expect(try sv.call("p.fanner", "fan", Self.fan("p.base", count: 0, base: 0, rows: 100), as: Int.self) == 0)
        try sv.waitUntil("16 chunks over the link") { try sv.call("p.fanner", "rowsSeen", as: Int.self) == 16 }
        kill(try #require(try sv.plugin("p.base").pid), SIGKILL)
        seen = []
        try sv.waitUntil("the stream's answer") {
            seen += try answers().filter { $0.hasPrefix("5999") }
            return !seen.isEmpty
        }
        #expect(seen == ["5999 unavailable started"], "\(seen)")
        #expect(try sv.call("p.fanner", "rowsSeen", as: Int.self) == 16, "no chunk twice")
    }

    @Test("the same after an upgrade in place: the link made before it keeps its mark in the callee's page, which the new binary read again, so the waiting calls are replayed, not failed as started")
    func waitingCallsOverAPeerLinkAcrossAnUpgrade() async throws {
        let w = try TestWorld()
        try w.bundle("p.base")
        try w.bundle("p.fanner", deps: [Dep("p.base")], library: try Build.cLibrary("fanner", source: Self.cFanner))
        let sv = try RunningSupervisor(w)
        try Self.linkFirst(sv)
        let client = try await SupervisorClient.connect(socket: sv.socket)
        defer { client.close() }
        #expect(try await client.upgrade().workers == 2)
        #expect(try sv.plugin("p.fanner").links == ["p.base"])
        // Answered after the page was asked for (the worker answers in order).
        #expect(try CrashReplayTests.ran(sv, "p.base") == [1000])
        try Self.expectLinkCallsReplayed(w, sv)
        #expect(!sv.log.contains("did not give its taken page back"), "\(sv.log)")
    }

    /// The first call from p.fanner to p.base goes through the supervisor and makes the link.
    static func linkFirst(_ sv: RunningSupervisor) throws {
        #expect(try sv.call("p.fanner", "fan", Self.fan("p.base", count: 1, base: 1000), as: Int.self) == 1)
        try sv.waitUntil("a link from p.fanner to p.base") { try sv.plugin("p.fanner").links == ["p.base"] }
        try sv.waitUntil("the first answer") { try sv.call("p.fanner", "answers", as: [String].self) == ["5000 ok 1000"] }
    }

    /// Over the link: `block`, then 64 calls behind it, p.base's worker killed: the 64 answered by
    /// the next worker, once, in order; `block` failed with started: true.
    static func expectLinkCallsReplayed(_ w: TestWorld, _ sv: RunningSupervisor) throws {
        func answers() throws -> [String] { try sv.call("p.fanner", "answers", as: [String].self) }
        // `block` holds the thread that delivers the link's calls: the 64 behind it stay unread.
        #expect(try sv.call("p.fanner", "fan", Self.fan("p.base", count: 64, base: 0, block: true), as: Int.self) == 64)
        try sv.waitUntil("the slow call to start") { FileManager.default.fileExists(atPath: w.home + "/data/p.base/blocking") }
        let pid = try #require(try sv.plugin("p.base").pid)
        kill(pid, SIGKILL)
        var seen: [String] = []
        try sv.waitUntil("65 answers") {
            seen += try answers()
            return seen.count >= 65
        }
        #expect(seen.count == 65, "\(seen)")
        #expect(seen.contains("4999 unavailable started"), "\(seen)")
        #expect(Set(seen) == Set((0..<64).map { "\(5000 + $0) ok \($0)" } + ["4999 unavailable started"]), "\(seen)")
        // Each ran once, by the next worker, in the order its plugin sent them.
        let ran = try CrashReplayTests.ran(sv, "p.base")
        #expect(ran == [1000] + Array(0..<64), "\(ran)")
        #expect(try sv.plugin("p.base").restarts == 1 && sv.plugin("p.base").pid != pid)
        let metrics = try Prometheus(sv.cli("metrics").out)
        #expect(metrics["plugin_calls_replayed_total", ["plugin": "p.base"]] == 64)
        #expect(metrics["plugin_calls_retried_total", ["plugin": "p.base"]] == nil)
        // The caller's next calls take a new link.
        try sv.waitUntil("a new link") {
            _ = try sv.call("p.fanner", "fan", Self.fan("p.base", count: 1, base: 2000), as: Int.self)
            return try sv.plugin("p.fanner").links == ["p.base"]
        }
    }

    @Test("over peer links, 8 callers, the callees killed 10 times: an idempotent method loses no call; one that is not fails only calls its plugin had started, and none runs twice")
    func killsUnderLoad() async throws {
        let w = try TestWorld()
        try w.bundle("p.idem", extra: ["idempotent": ["echo"]])
        try w.bundle("p.once")
        try w.bundle("p.user", deps: [Dep("p.idem"), Dep("p.once")])
        let cfg = try w.config(#"{"restartLimit": 1000000, "restartBackoffBaseMs": 1, "restartBackoffMaxMs": 5}"#)
        let sv = try RunningSupervisor(w, args: ["--config", cfg])
        let client = try await SupervisorClient.connect(socket: sv.socket)
        defer { client.close() }
        typealias Nested<P: Encodable & Sendable> = ClientTests.CallParams<P>
        @Sendable func echo(_ n: Int) async throws -> [Int] {
            try await client.call("p.user", "call", Nested(target: "p.idem", method: "echo", params: [n]), as: [Int].self)
        }
        @Sendable func tally(_ n: Int) async throws -> Int {
            try await client.call("p.user", "call", Nested(target: "p.once", method: "tally", params: n), as: Int.self)
        }
        func waitForLinks() async throws {
            try await waitUntil("links from p.user to both") {
                _ = try await echo(0)
                _ = try await client.call("p.user", "call", Nested<Int>(target: "p.once", method: "ran", params: nil), as: [Int].self)
                return try sv.plugin("p.user").links?.sorted() == ["p.idem", "p.once"]
            }
        }
        try await waitForLinks()
        let seen = Guarded(LinkReplayTests.Load())
        let callers = (0..<8).map { lane in
            Task {
                var n = 0
                while !seen.withLock({ $0.stop }) {
                    n += 1
                    do {
                        let echoed = try await echo(n)
                        seen.withLock { if echoed == [n] { $0.ok += 1 } else { $0.other.append("echo \(n): \(echoed)") } }
                    } catch {
                        seen.withLock { $0.other.append("echo \(n): \(error)") }
                    }
                    let value = lane * 1_000_000 + n
                    do {
                        let tallied = try await tally(value)
                        seen.withLock { $0.tallied.append(tallied) }
                    } catch let error as ErrorBody where error.code == "unavailable" && error.message.contains("after its plugin started tally") {
                        seen.withLock { $0.startedFailures += 1 }
                    } catch {
                        seen.withLock { $0.other.append("tally \(value): \(error)") }
                    }
                }
            }
        }
        for round in 0..<10 {
            try await waitForLinks()
            _ = try CrashReplayTests.killWorker(sv, round % 2 == 0 ? "p.idem" : "p.once")
        }
        let (result, resent) = try await LinkReplayTests.finish(seen, callers, sv, idempotent: "p.idem", once: "p.once")
        print("over peer links: 10 kills, \(result.ok) echoes, \(result.tallied.count) tallies, \(result.startedFailures) failed as started, "
              + "\(resent) replayed or retried")
        #expect(try sv.plugin("p.user").state == "running" && sv.plugin("p.user").restarts == 0)
    }
}
