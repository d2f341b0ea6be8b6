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
}
