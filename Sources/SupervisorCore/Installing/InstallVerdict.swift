/// Whether a version of a plugin may be swapped in among the installed ones (an install, an
/// update, an on-demand install): its dependencies must be installed, in range and free of
/// cycles, and no installed plugin that can start now may be left unable to (a dependent whose
/// range the new version is outside of), as the next folder scan would find it. Decided from
/// the manifests alone; the driver (Installs) rolls the swap back on a refusal.
package enum InstallVerdict: Equatable, Sendable {
    case allowed
    /// The new version itself cannot start among the installed plugins.
    case cannotStart(String)
    /// It could, but `dependent`, which can start now, could not then.
    case leaves(dependent: String, problem: String)

    /// `manifest`: the version to swap in; `installed`: every installed plugin's manifest (the
    /// plugin's current version among them, if it has one, is replaced).
    package static func judge(_ manifest: Manifest, installed: [Manifest]) -> InstallVerdict {
        let others = installed.filter { $0.identifier != manifest.identifier }
        let after = PluginCatalog(manifests: others + [manifest])
        if let problem = after.unstartable[manifest.identifier] { return .cannotStart(problem) }
        // Only what the new version changes counts: a plugin that could not start before is no
        // reason to refuse it. Dependencies first, so the plugin named is the one whose range is
        // not met rather than one further down that depends on it.
        let newlyBroken = after.order.filter { $0 != manifest.identifier && after.unstartable[$0] != nil }
        guard !newlyBroken.isEmpty else { return .allowed }
        let before = PluginCatalog(manifests: installed)
        guard let dependent = newlyBroken.first(where: { before.unstartable[$0] == nil }),
              let problem = after.unstartable[dependent] else { return .allowed }
        return .leaves(dependent: dependent, problem: problem)
    }

    /// The refusal's sentence for `<id> <version>`, or nil when allowed.
    package func refusal(_ what: String) -> String? {
        switch self {
        case .allowed: nil
        case .cannotStart(let problem): "\(what) cannot start here: \(problem); not installed"
        case .leaves(let dependent, let problem):
            "\(what) would leave \(dependent) unable to start (\(problem)): update or uninstall \(dependent) first; not installed"
        }
    }
}
