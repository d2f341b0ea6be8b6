import Dispatch
import Synchronization
import Foundation

/// Latency samples in nanoseconds.
struct Samples {
    var values: [UInt64] = []

    mutating func add(_ ns: UInt64) { values.append(ns) }

    func percentile(_ p: Double) -> Double {
        guard !values.isEmpty else { return .nan }
        let sorted = values.sorted()
        let index = min(sorted.count - 1, Int((Double(sorted.count) * p).rounded(.up)) - 1)
        return Double(sorted[max(0, index)]) / 1000
    }

    var median: Double { percentile(0.5) }
}

/// The middle value (the upper of the two middle ones for an even count); 0 for none.
func median(_ values: [Double]?) -> Double {
    let sorted = (values ?? []).sorted()
    return sorted.isEmpty ? 0 : sorted[sorted.count / 2]
}

func now() -> UInt64 {
    var ts = timespec()
    clock_gettime(CLOCK_MONOTONIC, &ts)
    return UInt64(ts.tv_sec) * 1_000_000_000 + UInt64(ts.tv_nsec)
}

/// One line of the report.
struct Metric: Codable {
    var name: String
    var value: Double
    var unit: String
    var baseline: String?
    var ratio: Double?
    var target: String?
}

final class Report {
    var metrics: [Metric] = []

    func add(_ name: String, _ value: Double, _ unit: String, baseline: (String, Double)? = nil, target: String? = nil) {
        metrics.append(Metric(name: name, value: value, unit: unit, baseline: baseline?.0,
                              ratio: baseline.map { value / $0.1 }, target: target))
    }

    func printTable() {
        let nameWidth = max(40, metrics.map(\.name.count).max() ?? 0)
        print("metric".padding(toLength: nameWidth, withPad: " ", startingAt: 0) + "  " + "value".leftPad(12) + "  unit    ratio      target")
        for m in metrics {
            let value = m.value >= 100 ? String(format: "%.0f", m.value) : String(format: "%.2f", m.value)
            let ratio = m.ratio.map { String(format: "%.2f× %@", $0, m.baseline ?? "") } ?? ""
            print(m.name.padding(toLength: nameWidth, withPad: " ", startingAt: 0) + "  " + value.leftPad(12) + "  "
                  + m.unit.padding(toLength: 6, withPad: " ", startingAt: 0) + "  " + ratio + (m.target.map { "   [\($0)]" } ?? ""))
        }
    }
}

extension String {
    func leftPad(_ n: Int) -> String { count >= n ? self : String(repeating: " ", count: n - count) + self }
}

/// Runs `body` on a task and waits for it on this (the bench's main) thread: the sections are
/// sequential, the programs they measure are async.
func waitFor<T: Sendable>(_ body: @escaping @Sendable () async throws -> T) throws -> T {
    let outcome = Mutex<Result<T, any Error>?>(nil)
    let done = DispatchSemaphore(value: 0)
    Task {
        do {
            let value = try await body()
            outcome.withLock { $0 = .success(value) }
        } catch {
            outcome.withLock { $0 = .failure(error) }
        }
        done.signal()
    }
    done.wait()
    return try outcome.withLock { $0 }!.get()
}
