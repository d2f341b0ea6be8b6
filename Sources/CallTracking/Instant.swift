/// A moment on the monotonic clock, in nanoseconds since an arbitrary start (the kernel's
/// `CLOCK_MONOTONIC`, which NIO's `NIODeadline` and `ProcessControl.monotonicNanoseconds` read
/// too). The core reads no clock: every input that depends on time carries its `Instant`, so a
/// test drives time as it likes.
package struct Instant: Comparable, Hashable, Sendable, CustomStringConvertible {
    package var nanoseconds: UInt64

    package init(nanoseconds: UInt64) {
        self.nanoseconds = nanoseconds
    }

    package static let zero = Instant(nanoseconds: 0)
    /// Later than any deadline: what nothing is due by.
    package static let never = Instant(nanoseconds: .max)

    package static func < (a: Instant, b: Instant) -> Bool { a.nanoseconds < b.nanoseconds }

    /// `milliseconds` later (or earlier, for a negative amount; never before zero).
    package func adding(milliseconds: Int) -> Instant { adding(nanoseconds: Int64(milliseconds) * 1_000_000) }

    package func adding(nanoseconds delta: Int64) -> Instant {
        if delta >= 0 { return Instant(nanoseconds: nanoseconds &+ UInt64(delta)) }
        let back = UInt64(-delta)
        return Instant(nanoseconds: nanoseconds > back ? nanoseconds - back : 0)
    }

    /// How long after `earlier` this is, in nanoseconds (negative if before it).
    package func nanoseconds(since earlier: Instant) -> Int64 {
        nanoseconds >= earlier.nanoseconds ? Int64(nanoseconds - earlier.nanoseconds) : -Int64(earlier.nanoseconds - nanoseconds)
    }

    package var description: String { "\(nanoseconds) ns" }

    /// A reading of the monotonic clock in signed nanoseconds, as the worker and the client libraries
    /// keep it.
    @inlinable
    package init(monotonic nanoseconds: Int64) {
        self.nanoseconds = UInt64(max(0, nanoseconds))
    }

    /// The same, signed (`Int64.max` for `never`).
    @inlinable
    package var monotonic: Int64 { nanoseconds > UInt64(Int64.max) ? .max : Int64(nanoseconds) }
}

extension Instant {
    package static func + (instant: Instant, span: Duration) -> Instant { instant.adding(nanoseconds: span.nanoseconds) }
    package static func - (instant: Instant, span: Duration) -> Instant { instant.adding(nanoseconds: -span.nanoseconds) }
}

extension Duration {
    /// The span in whole nanoseconds (what the core counts in).
    package var nanoseconds: Int64 {
        let (seconds, attoseconds) = components
        return seconds * 1_000_000_000 + attoseconds / 1_000_000_000
    }
}
