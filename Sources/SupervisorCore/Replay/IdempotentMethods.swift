/// The methods of one plugin that may run twice with the same effect (SPEC §15): a started call of
/// one of them is sent again after its worker crashed; any other started call is never run twice.
///
/// Two sources, read alike: the manifest's `idempotent` list and the methods the plugin's worker
/// flagged in `hello` (the SDK's `idempotent: true` on a method, a C plugin's `idempotent`
/// message). An entry ending in `*` matches every method that starts with what comes before it
/// (`"*"` matches them all). A flag only widens what the plugin itself may be asked to run again.
package struct IdempotentMethods: Sendable, Equatable {
    /// Methods matched whole.
    package private(set) var names: Set<String> = []
    /// Prefixes (an entry's text before its trailing `*`), each matching every method it starts.
    package private(set) var prefixes: [String] = []

    /// No method: every started call fails after a crash.
    package init() {}

    /// The manifest's `idempotent` entries (BundleModel checked that `*` only ends one).
    package init(patterns: [String]) {
        for pattern in patterns {
            if pattern.hasSuffix("*") {
                prefixes.append(String(pattern.dropLast()))
            } else {
                names.insert(pattern)
            }
        }
    }

    /// The manifest's list, with the methods a worker flagged in `hello`.
    package init(manifest: Manifest, flagged: [String] = []) {
        self.init(patterns: manifest.idempotent)
        self = adding(flagged: flagged)
    }

    /// These, and `methods` (a `hello`'s flagged entries, read as the manifest's are).
    package func adding(flagged methods: [String]) -> IdempotentMethods {
        var widened = self
        let flagged = IdempotentMethods(patterns: methods)
        widened.names.formUnion(flagged.names)
        widened.prefixes += flagged.prefixes
        return widened
    }

    /// Whether a started call of `method` may be sent again.
    package func contains(_ method: String) -> Bool {
        names.contains(method) || prefixes.contains { method.hasPrefix($0) }
    }

    package var isEmpty: Bool { names.isEmpty && prefixes.isEmpty }
}
