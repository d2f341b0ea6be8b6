import Dispatch
import Foundation
import PluginSDK

/// A plugin that leans on Foundation, Dispatch and async/await, to show they work inside a worker.
final class AsyncWorks: Pluggable {
    static let identifier = "com.example.asyncworks"

    init() {}

    struct SleepParams: Codable, Sendable { var ms: Int }
    struct Report: Codable, Sendable {
        var sum: Int
        var date: String
        var uuid: String
        var dataFileBytes: Int
    }

    struct RowsParams: Codable, Sendable { var count: Int }
    struct Row: Codable, Sendable {
        var n: Int
        var square: Int
    }

    private let dataDirectory = LockedValue("")

    func startup(_ context: PluginContext) async throws {
        dataDirectory.set(context.dataDirectory)
    }

    func exports(_ api: PluginAPI) {
        // Holds its caller for `ms` milliseconds without holding up other calls.
        api.method("sleep") { (p: SleepParams) async throws -> Int in
            // At most a day: a larger `ms` would overflow the nanoseconds.
            try await Task.sleep(nanoseconds: UInt64(min(max(0, p.ms), 86_400_000)) * 1_000_000)
            return p.ms
        }
        // Answers with a stream: `supervisor call --stream com.example.asyncworks rows '{"count":5}'`
        // prints one row a line as it comes. `send` waits while the reader has no room.
        api.stream("rows") { (p: RowsParams, out: StreamOutput<Row>) in
            for n in 0..<max(0, p.count) { try await out.send(Row(n: n, square: n * n)) }
        }
        // Exercises a task group, Dispatch, Foundation's formatters and file I/O in the data folder.
        api.method("work") { () async throws -> Report in
            let sum = await withTaskGroup(of: Int.self) { group in
                for i in 1...8 { group.addTask { i * i } }
                return await group.reduce(0, +)
            }
            let fromDispatch = await withCheckedContinuation { (c: CheckedContinuation<Int, Never>) in
                DispatchQueue.global().async { c.resume(returning: 42) }
            }
            let file = URL(fileURLWithPath: self.dataDirectory.get()).appendingPathComponent("asyncworks.txt")
            try Data("written at \(Date())\n".utf8).write(to: file)
            let bytes = try Data(contentsOf: file).count
            let formatter = ISO8601DateFormatter()
            return Report(sum: sum + fromDispatch, date: formatter.string(from: Date()), uuid: UUID().uuidString, dataFileBytes: bytes)
        }
    }
}

/// A value behind a lock.
final class LockedValue<T: Sendable>: @unchecked Sendable {
    private let lock = NSLock()
    private var value: T
    init(_ value: T) { self.value = value }
    func get() -> T { lock.withLock { value } }
    func set(_ v: T) { lock.withLock { value = v } }
}

@_cdecl("sp_plugin_create")
public func spPluginCreate(_ host: OpaquePointer?) -> OpaquePointer? { PluginExport.create(AsyncWorks.self, host: host) }
