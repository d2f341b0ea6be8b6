#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif

/// `hello`: the worker's first message, once its plugin library is loaded and created.
public struct HelloMessage: Codable, Sendable, Equatable {
    public var type = MessageKind.hello
    public var `protocol`: Int
    public var abi: UInt32
    public var pid: Int32
    public var plugin: String
    public var version: String
    /// Extension: the sandbox layers in force in this worker (docs/sandbox.md).
    public var sandbox: [String]?
    /// Extension: the layers the host could not provide, each with why.
    public var sandboxMissing: [String]?
    /// Extension: microseconds spent in each start-up phase (spawn → exec, sandbox, dlopen, create).
    public var timings: [String: Int]?
    /// Extension: the worker writes the taken page it was given at its spawn (`WorkerSpec.takenPageFD`;
    /// SPEC §15, docs/protocol.md "Calls that survive a crash").
    public var takenPage: Bool?
    /// Extension: with `takenPage`, the worker also keeps in that page a mark for each direct or
    /// peer link it serves whose order names a `markSlot` (`PeerLinkOrder.markSlot`).
    public var linkMarks: Bool?
    /// Extension: with `takenPage`, the worker keeps the page's descriptor, and sends it on its
    /// payload channel when the supervisor asks (`takenPage`): a supervisor that took the worker
    /// over in an upgrade in place reads its marks again.
    public var takenPageKept: Bool?
    /// Extension: the methods the plugin declared idempotent while it was created (SPEC §15).
    public var idempotent: [String]?

    public init(protocol: Int = Frame.protocolVersion, abi: UInt32, pid: Int32, plugin: String, version: String,
                sandbox: [String]? = nil, sandboxMissing: [String]? = nil, timings: [String: Int]? = nil, takenPage: Bool? = nil,
                linkMarks: Bool? = nil, takenPageKept: Bool? = nil, idempotent: [String]? = nil) {
        self.protocol = `protocol`
        self.abi = abi
        self.pid = pid
        self.plugin = plugin
        self.version = version
        self.sandbox = sandbox
        self.sandboxMissing = sandboxMissing
        self.timings = timings
        self.takenPage = takenPage
        self.linkMarks = linkMarks
        self.takenPageKept = takenPageKept
        self.idempotent = idempotent
    }
}

extension HelloMessage {
    /// The frame, written without Foundation's `JSONEncoder` (whose first use in a freshly started
    /// worker costs a few hundred microseconds of its start): the same JSON object, decoded by the
    /// supervisor with `ProtocolJSON` as any other (ProtocolTests round-trips it).
    public func frame() -> [UInt8] {
        var b = FrameBuilder(kind: .hello, capacity: 640)
        b.int("protocol", `protocol`)
        b.uint("abi", UInt64(abi))
        b.int("pid", Int(pid))
        b.string("plugin", plugin)
        b.string("version", version)
        if let sandbox { b.strings("sandbox", sandbox) }
        if let sandboxMissing { b.strings("sandboxMissing", sandboxMissing) }
        if let timings { b.object("timings", members: timings.sorted { $0.key < $1.key }.map { ($0.key, .int($0.value)) }) }
        if takenPage == true { b.flag("takenPage") }
        if linkMarks == true { b.flag("linkMarks") }
        if takenPageKept == true { b.flag("takenPageKept") }
        if let idempotent, !idempotent.isEmpty { b.strings("idempotent", idempotent) }
        return b.finish()
    }
}

/// `log`: a line for the supervisor's log, tagged with the plugin's identifier by the supervisor.
public struct LogMessage: Codable, Sendable, Equatable {
    public var type = MessageKind.log
    public var level: String
    public var message: String
    public var metadata: [String: String]?

    public init(level: String, message: String, metadata: [String: String]? = nil) {
        self.level = level
        self.message = message
        self.metadata = metadata
    }
}

/// Extension `exit`: the worker says why it is about to end itself (load error, sandbox violation),
/// so the supervisor can record the cause rather than only an exit code.
public struct ExitNotice: Codable, Sendable, Equatable {
    public var type = MessageKind.exit
    public var reason: ExitReason
    public var message: String
    public var syscall: String?
    /// With `signaled`: the signal a worker that is PID 1 of its own namespace reports it dies of
    /// (the kernel spares such a process the signals it sends itself; it exits with 128 + the signal).
    public var signal: String?

    public init(reason: ExitReason, message: String, syscall: String? = nil, signal: String? = nil) {
        self.reason = reason
        self.message = message
        self.syscall = syscall
        self.signal = signal
    }
}

/// The `error` object of a reply.
public struct ErrorBody: Codable, Sendable, Equatable, Error, CustomStringConvertible {
    public var code: String
    public var message: String
    /// What the supervisor adds to an error of its own, where it knows more (SPEC §3, §15).
    public var data: ErrorData?

    public init(code: String, message: String, data: ErrorData? = nil) {
        self.code = code
        self.message = message
        self.data = data
    }

    public init(_ code: ErrorCode, _ message: String, data: ErrorData? = nil) {
        self.init(code: code.rawValue, message: message, data: data)
    }

    /// The plugin may have started the call before its worker ended (SPEC §15): its effect may
    /// have happened, though no answer came. `"data": {"started": true}` on the wire.
    public var started: Bool { data?.started ?? false }

    public var description: String { "\(code): \(message)" + (started ? " (started: its effect may have happened)" : "") }
}

/// An error's `data` object.
public struct ErrorData: Codable, Sendable, Equatable {
    /// The call was started by the plugin of a worker that ended before answering it.
    public var started: Bool?

    public init(started: Bool? = nil) {
        self.started = started
    }
}

/// Shared JSON coders for the protocol's Codable messages.
public enum ProtocolJSON {
    /// Encodes `value` as a frame body.
    public static func encode<T: Encodable>(_ value: T) throws -> [UInt8] {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
        return Array(try encoder.encode(value))
    }

    /// Encodes `value` as a whole frame (length prefix included).
    public static func frame<T: Encodable>(_ value: T) throws -> [UInt8] {
        [UInt8].frame(body: try encode(value))
    }

    public static func decode<T: Decodable>(_ type: T.Type, from bytes: UnsafeRawBufferPointer) throws -> T {
        try JSONDecoder().decode(type, from: Data(bytes))
    }

    public static func decode<T: Decodable>(_ type: T.Type, from bytes: [UInt8]) throws -> T {
        try JSONDecoder().decode(type, from: Data(bytes))
    }
}
