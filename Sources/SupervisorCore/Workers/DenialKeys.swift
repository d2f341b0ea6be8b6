/// The names a plugin's sandbox denials are counted under (`status`'s `sandboxDenials`, the
/// denials metric): each refused syscall its own, up to `limit` of them; any more under `other`.
/// A plugin that calls thousands of made-up syscall numbers cannot grow the supervisor's tables,
/// its status and its metrics without bound (each new name is a new label, and adding one takes
/// the loop longer the more there are).
package enum DenialKeys {
    package static let limit = 64
    package static let other = "other"

    /// The name to count a denial of `syscall` under, given the names counted so far.
    package static func key(_ syscall: String, counted: [String: Int]) -> String {
        counted[syscall] != nil || counted.count < limit ? syscall : other
    }
}
