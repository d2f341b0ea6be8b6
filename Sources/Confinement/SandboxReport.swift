import PluginProtocol

/// The sandbox layers a process put in force and the ones it lacks, each with why: what the
/// worker's `hello` and the installer's first line report, and `status` shows (`landlock`,
/// `landlock: why`). The worker and the installer record them alike through it.
public struct SandboxReport: Sendable {
    /// The layers in force, in the order they were put on.
    public var layers: [String] = []
    /// The layers missing, each as `layer: why`.
    public var missing: [String] = []

    public init() {}

    /// Records `layer` as in force.
    public mutating func add(_ layer: SandboxLayer) {
        layers.append(layer.rawValue)
    }

    /// Records `layer` as missing, and why.
    public mutating func lack(_ layer: SandboxLayer, _ why: String) {
        missing.append("\(layer.rawValue): \(why)")
    }
}
