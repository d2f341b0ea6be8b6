#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif

/// The worker reads its spec without Foundation's `JSONDecoder`. A worker is a fresh process (forked
/// from a fork server that ran no Swift code), and the decoder's first use there cost ~0.55 ms of a
/// ~4.5 ms start (0.05 ms once warm): its generic containers are instantiated and its dynamic casts
/// scan the Swift runtime's conformance records, for every type it meets. The spec is the
/// supervisor's `ProtocolJSON.encode(WorkerSpec)`; `WorkerSpecReadingTests` checks that this reads
/// back every field of it as `JSONDecoder` does. An unknown member is skipped (a newer supervisor's).
extension WorkerSpec {
    public typealias ReadingError = JSONReadingError

    public init(reading bytes: [UInt8]) throws(ReadingError) {
        self = try bytes.withUnsafeBytes { raw in Result { () throws(ReadingError) in try WorkerSpec(reading: raw) } }.get()
    }

    public init(reading bytes: UnsafeRawBufferPointer) throws(ReadingError) {
        let json = JSONMembers(bytes, "the spec")
        var identifier: String?, version: String?, bundle: String?, library: String?, dataDirectory: String?
        var supervisorPID: Int32?, socketFD: Int32?, maxFrameBytes: Int?, sandbox: SandboxSpec?
        var rest = WorkerSpec(identifier: "", version: "", bundle: "", library: "", dataDirectory: "", supervisorPID: 0)
        try json.members(of: 0..<bytes.count, "the spec") { (key, value) throws(ReadingError) in
            switch key {
            case "identifier": identifier = try json.string(value, key)
            case "version": version = try json.string(value, key)
            case "bundle": bundle = try json.string(value, key)
            case "library": library = try json.string(value, key)
            case "dataDirectory": dataDirectory = try json.string(value, key)
            case "liveDirectory": rest.liveDirectory = try json.optional(value) { (r) throws(ReadingError) in try json.string(r, key) }
            case "tempDirectory": rest.tempDirectory = try json.optional(value) { (r) throws(ReadingError) in try json.string(r, key) }
            case "supervisorPID": supervisorPID = try json.int32(value, key)
            case "uid": rest.uid = try json.optional(value) { (r) throws(ReadingError) in try json.uint32(r, key) }
            case "gid": rest.gid = try json.optional(value) { (r) throws(ReadingError) in try json.uint32(r, key) }
            case "socketFD": socketFD = try json.int32(value, key)
            case "descriptorChannelFD": rest.descriptorChannelFD = try json.optional(value) { (r) throws(ReadingError) in try json.int32(r, key) }
            case "payloadChannelFD": rest.payloadChannelFD = try json.optional(value) { (r) throws(ReadingError) in try json.int32(r, key) }
            case "takenPageFD": rest.takenPageFD = try json.optional(value) { (r) throws(ReadingError) in try json.int32(r, key) }
            case "cgroupProcs": rest.cgroupProcs = try json.optional(value) { (r) throws(ReadingError) in try json.strings(r, key) }
            case "cgroupTasks": rest.cgroupTasks = try json.optional(value) { (r) throws(ReadingError) in try json.strings(r, key) }
            case "cgroupMissing": rest.cgroupMissing = try json.optional(value) { (r) throws(ReadingError) in try json.string(r, key) }
            case "cgroupFolders": rest.cgroupFolders = try json.optional(value) { (r) throws(ReadingError) in try json.strings(r, key) }
            case "cgroupBySupervisor": rest.cgroupBySupervisor = try json.optional(value) { (r) throws(ReadingError) in try json.bool(r, key) }
            case "maxFrameBytes": maxFrameBytes = try json.int(value, key)
            case "maxPayloadBytes": rest.maxPayloadBytes = try json.optional(value) { (r) throws(ReadingError) in try json.int(r, key) }
            case "maxJSONDepth": rest.maxJSONDepth = try json.optional(value) { (r) throws(ReadingError) in try json.int(r, key) }
            case "peerLinks": rest.peerLinks = try json.optional(value) { (r) throws(ReadingError) in try json.bool(r, key) }
            case "spinMicroseconds": rest.spinMicroseconds = try json.optional(value) { (r) throws(ReadingError) in try json.int(r, key) }
            case "standby": rest.standby = try json.optional(value) { (r) throws(ReadingError) in try json.bool(r, key) }
            case "hostNetworkNamespace": rest.hostNetworkNamespace = try json.optional(value) { (r) throws(ReadingError) in try json.uint64(r, key) }
            case "sandbox": sandbox = try SandboxSpec(reading: json, value)
            default: break
            }
        }
        self = rest
        self.identifier = try json.required(identifier, "identifier")
        self.version = try json.required(version, "version")
        self.bundle = try json.required(bundle, "bundle")
        self.library = try json.required(library, "library")
        self.dataDirectory = try json.required(dataDirectory, "dataDirectory")
        self.supervisorPID = try json.required(supervisorPID, "supervisorPID")
        self.socketFD = try json.required(socketFD, "socketFD")
        self.maxFrameBytes = try json.required(maxFrameBytes, "maxFrameBytes")
        self.sandbox = try json.required(sandbox, "sandbox")
    }
}

extension SandboxSpec {
    init(reading json: JSONMembers, _ range: Range<Int>) throws(WorkerSpec.ReadingError) {
        var enabled: Bool?, permissions: [Permission]?, required: [SandboxLayer]?, runtimePaths: [String]?
        var rest = SandboxSpec()
        try json.members(of: range, "the spec's sandbox") { (key, value) throws(WorkerSpec.ReadingError) in
            switch key {
            case "enabled": enabled = try json.bool(value, key)
            case "memoryMB": rest.memoryMB = try json.optional(value) { (r) throws(WorkerSpec.ReadingError) in try json.int(r, key) }
            case "openFiles": rest.openFiles = try json.optional(value) { (r) throws(WorkerSpec.ReadingError) in try json.int(r, key) }
            case "permissions":
                permissions = try json.strings(value, key).map { (text) throws(WorkerSpec.ReadingError) in
                    guard let permission = Permission(text) else { throw .init(description: "sandbox.permissions: unknown permission '\(text)'") }
                    return permission
                }
            case "required":
                required = try json.strings(value, key).map { (text) throws(WorkerSpec.ReadingError) in
                    guard let layer = SandboxLayer(rawValue: text) else { throw .init(description: "sandbox.required: unknown layer '\(text)'") }
                    return layer
                }
            case "runtimePaths": runtimePaths = try json.strings(value, key)
            case "debuggable": rest.debuggable = try json.optional(value) { (r) throws(WorkerSpec.ReadingError) in try json.bool(r, key) }
            case "seccompProgram":
                rest.seccompProgram = try json.optional(value) { (r) throws(WorkerSpec.ReadingError) in
                    guard let data = Data(base64Encoded: try json.string(r, key)) else { throw .init(description: "sandbox.seccompProgram is not base64") }
                    return data
                }
            default: break
            }
        }
        self = rest
        self.enabled = try json.required(enabled, "sandbox.enabled")
        self.permissions = try json.required(permissions, "sandbox.permissions")
        self.required = try json.required(required, "sandbox.required")
        self.runtimePaths = try json.required(runtimePaths, "sandbox.runtimePaths")
    }
}

/// Why a message read by hand (`JSONMembers`) was refused: the member and what was wrong with it.
public struct JSONReadingError: Error, CustomStringConvertible, Sendable {
    public var description: String

    package init(description: String) {
        self.description = description
    }
}

/// The values of one JSON document (checked whole by `JSONScanner` as it goes), read by range: for
/// the few messages read in a fresh process, where Foundation's `JSONDecoder` would cost its first
/// use (the worker's spec, the Swift SDK's `startup` payload).
package struct JSONMembers {
    package let bytes: UnsafeRawBufferPointer
    /// What the document is, for errors ("the spec").
    let what: String

    package init(_ bytes: UnsafeRawBufferPointer, _ what: String) {
        self.bytes = bytes
        self.what = what
    }

    package typealias ReadingError = JSONReadingError

    /// A value's place in `bytes`, kept in arrays as a plain struct: an array of `Range<Int>` (or of
    /// tuples holding one) makes the Swift runtime instantiate that type by name and check
    /// `Int: Comparable`, and a fresh process's first such check scans every protocol conformance
    /// record of every loaded library (~0.1 ms of a worker's start, seen in `perf`).
    struct Span {
        let lower: Int, upper: Int
        var range: Range<Int> { lower..<upper }
    }

    /// Calls `member` with each key and its value's range in the object at `range`.
    package func members(of range: Range<Int>, _ what: String, _ member: (String, Range<Int>) throws(ReadingError) -> Void) throws(ReadingError) {
        let base = range.lowerBound
        var keys: [String] = []
        var values: [Span] = []
        var scanner = JSONScanner(UnsafeRawBufferPointer(rebasing: bytes[range]))
        do {
            try scanner.scanObject { key, value in
                keys.append(String(decoding: UnsafeRawBufferPointer(rebasing: bytes[(base + key.lowerBound)..<(base + key.upperBound)]), as: UTF8.self))
                values.append(Span(lower: base + value.lowerBound, upper: base + value.upperBound))
            }
        } catch {
            throw ReadingError(description: "\(what) is not a valid JSON object: \(error)")
        }
        for i in keys.indices { try member(keys[i], values[i].range) }
    }

    /// `value`, read earlier from the member `key`; that it is missing is an error.
    package func required<T>(_ value: T?, _ key: String) throws(ReadingError) -> T {
        guard let value else { throw ReadingError(description: "\(what) has no \(key)") }
        return value
    }

    package func isNull(_ range: Range<Int>) -> Bool {
        range.count == 4 && bytes[range.lowerBound] == UInt8(ascii: "n")
    }

    /// nil for `null`, else `read`'s value.
    package func optional<T>(_ range: Range<Int>, _ read: (Range<Int>) throws(ReadingError) -> T) throws(ReadingError) -> T? {
        isNull(range) ? nil : try read(range)
    }

    package func string(_ range: Range<Int>, _ key: String) throws(ReadingError) -> String {
        guard let text = JSONScanner.decodeString(bytes, range) else { throw wrong(key, "a string") }
        return text
    }

    package func bool(_ range: Range<Int>, _ key: String) throws(ReadingError) -> Bool {
        switch range.count {
        case 4 where bytes[range.lowerBound] == UInt8(ascii: "t"): return true
        case 5 where bytes[range.lowerBound] == UInt8(ascii: "f"): return false
        default: throw wrong(key, "true or false")
        }
    }

    package func int(_ range: Range<Int>, _ key: String) throws(ReadingError) -> Int {
        let negative = !range.isEmpty && bytes[range.lowerBound] == UInt8(ascii: "-")
        guard let magnitude = JSONScanner.decodeUInt(bytes, negative ? (range.lowerBound + 1)..<range.upperBound : range),
              magnitude <= UInt64(Int.max) else { throw wrong(key, "an integer") }
        return negative ? -Int(magnitude) : Int(magnitude)
    }

    package func int32(_ range: Range<Int>, _ key: String) throws(ReadingError) -> Int32 {
        guard let value = Int32(exactly: try int(range, key)) else { throw wrong(key, "a 32-bit integer") }
        return value
    }

    package func uint32(_ range: Range<Int>, _ key: String) throws(ReadingError) -> UInt32 {
        guard let value = UInt32(exactly: try int(range, key)) else { throw wrong(key, "an unsigned 32-bit integer") }
        return value
    }

    package func uint64(_ range: Range<Int>, _ key: String) throws(ReadingError) -> UInt64 {
        guard let value = JSONScanner.decodeUInt(bytes, range) else { throw wrong(key, "an unsigned integer") }
        return value
    }

    package func strings(_ range: Range<Int>, _ key: String) throws(ReadingError) -> [String] {
        var ranges: [Span] = []
        let base = range.lowerBound
        var scanner = JSONScanner(UnsafeRawBufferPointer(rebasing: bytes[range]))
        do {
            try scanner.scanArray { value in ranges.append(Span(lower: base + value.lowerBound, upper: base + value.upperBound)) }
        } catch {
            throw wrong(key, "an array of strings")
        }
        var out: [String] = []
        out.reserveCapacity(ranges.count)
        for r in ranges { out.append(try string(r.range, key)) }
        return out
    }

    /// "the spec's socketFD is not a 32-bit integer".
    package func wrong(_ key: String, _ expected: String) -> ReadingError {
        ReadingError(description: "\(what)'s \(key) is not \(expected)")
    }
}
