/// How loud a line the core asks the driver to log is (swift-log's levels, which the driver maps
/// them to: the core imports no logging library).
package enum LogLevel: Int, Comparable, Sendable {
    case trace, debug, info, notice, warning, error, critical

    package static func < (a: LogLevel, b: LogLevel) -> Bool { a.rawValue < b.rawValue }
}
