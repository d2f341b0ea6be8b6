import PluginProtocol
import Testing
import SupervisorCore
@testable import SupervisorKit

/// What a worker may say, and when (Routing/WorkerMessage.swift): each frame read alone, without a
/// worker or a socket.
@Suite struct WorkerMessageTests {
    static func read(_ json: String, saidHello: Bool = true, plugin: String = "p") -> WorkerMessage {
        Array(json.utf8).withUnsafeBytes { WorkerMessage.read($0, maxDepth: 64, saidHello: saidHello, plugin: plugin).0 }
    }

    static func hello(_ plugin: String = "p", protocol version: Int = Frame.protocolVersion) -> String {
        #"{"type":"hello","protocol":\#(version),"abi":1,"pid":7,"plugin":"\#(plugin)","version":"1.0.0"}"#
    }

    @Test func aHelloFirstThenRequestsAndReplies() {
        guard case .hello(let hello) = Self.read(Self.hello(), saidHello: false) else { Issue.record("no hello"); return }
        #expect(hello.plugin == "p" && hello.pid == 7)
        #expect(Self.read(#"{"type":"reply","id":12,"result":1}"#) == .reply(id: 12))
        #expect(Self.read(#"{"type":"call","id":3,"target":"q","method":"m"}"#) == .request(.call))
        #expect(Self.read(#"{"type":"open","id":4,"uri":"q:/x"}"#) == .request(.open))
        #expect(Self.read(#"{"type":"pong","id":9}"#) == .pong(id: 9))
        #expect(Self.read(#"{"type":"linkCalls","target":"q","calls":[1,0,0,0]}"#) == .linkCalls)
    }

    @Test func logsAndExitNoticesMayComeBeforeHello() {
        #expect(Self.read(#"{"type":"log","level":"info","message":"m"}"#, saidHello: false) == .log)
        #expect(Self.read(#"{"type":"exit","reason":"loadError","message":"dlopen failed"}"#, saidHello: false)
                == .exit(ExitNotice(reason: .loadError, message: "dlopen failed")))
        // A notice that does not decode is still an exit notice; its exit code decides.
        #expect(Self.read(#"{"type":"exit","reason":"nonsense"}"#, saidHello: false) == .exit(nil))
    }

    @Test(arguments: [
        (#"{"type":"call","id":1,"target":"q","method":"m"}"#, false, "call before hello"),
        (#"not json"#, true, "invalid frame"),
        (#"{"type":"teleport","id":1}"#, true, "unknown message type 'teleport'"),
        (#"{"type":1,"id":1}"#, true, #"the message's "type" is not a string"#),
        (#"{"id":1}"#, true, #"a message needs a "type""#),
        (#"{"type":"reply","id":-1}"#, true, "reply with an id that is not an unsigned integer"),
        (#"{"type":"reply","result":1}"#, true, "reply without an id"),
        (#"{"type":"restart","id":1,"target":"q"}"#, true, "a worker may not send restart"),
        (#"{"type":"hello","protocol":1,"abi":1,"pid":7,"plugin":"p","version":"1.0.0"}"#, true, "a second hello"),
        (#"{"type":"hello","protocol":1}"#, false, "malformed hello"),
    ])
    func violations(_ json: String, _ saidHello: Bool, _ expected: String) {
        guard case .violation(let why) = Self.read(json, saidHello: saidHello) else {
            Issue.record("\(json) was taken")
            return
        }
        #expect(why.hasPrefix(expected), "\(why)")
    }

    @Test func aHelloMustSpeakThisProtocolAndNameItsPlugin() {
        guard case .violation(let other) = Self.read(Self.hello("q"), saidHello: false) else { Issue.record("taken"); return }
        #expect(other == "hello names plugin q, expected p")
        guard case .violation(let old) = Self.read(Self.hello(protocol: Frame.protocolVersion + 1), saidHello: false) else { Issue.record("taken"); return }
        #expect(old.hasPrefix("hello speaks protocol \(Frame.protocolVersion + 1)"))
    }

    /// A `hello` is plugin code's to forge (a library constructor runs before the worker's own is
    /// sent): lists beyond a worker's are a violation, not thousands of warnings kept for good.
    @Test func aHelloListsNoMoreThanAWorkerWould() {
        func hello(_ field: String, _ value: String) -> String {
            #"{"type":"hello","protocol":\#(Frame.protocolVersion),"abi":1,"pid":7,"plugin":"p","version":"1.0.0","\#(field)":\#(value)}"#
        }
        func strings(_ n: Int, length: Int = 8) -> String {
            "[" + (0..<n).map { "\"\(String(repeating: "x", count: length))\($0)\"" }.joined(separator: ",") + "]"
        }
        // A worker's own: taken.
        guard case .hello = Self.read(hello("sandboxMissing", strings(3)), saidHello: false) else { Issue.record("refused"); return }
        guard case .hello = Self.read(hello("idempotent", strings(WorkerMessage.idempotentLimit)), saidHello: false) else { Issue.record("refused"); return }
        let cases = [
            (hello("sandboxMissing", strings(WorkerMessage.helloListLimit + 1)), "hello lists 65 entries in sandboxMissing; a worker may list 64"),
            (hello("sandbox", strings(100_001)), "hello lists 100001 entries in sandbox; a worker may list 64"),
            (hello("sandboxMissing", strings(1, length: 600)), "hello has an entry of 601 bytes in sandboxMissing; one may have 512"),
            (hello("idempotent", strings(WorkerMessage.idempotentLimit + 1)), "hello lists 1025 entries in idempotent; a worker may list 1024"),
            (hello("timings", "{" + (0..<65).map { "\"t\($0)\":1" }.joined(separator: ",") + "}"), "hello lists 65 entries in timings; a worker may list 64"),
        ]
        for (json, expected) in cases {
            guard case .violation(let why) = Self.read(json, saidHello: false) else { Issue.record("taken: \(expected)"); continue }
            #expect(why == expected)
        }
    }
}
