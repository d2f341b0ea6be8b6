import Bundles
import SupervisorCore

extension PluginRecord {
    /// Why a command that would restart, update or uninstall it is refused now, if it is: a rescan
    /// is stopping it for its removal (and may add it again once stopped). Its folder is the
    /// rescan's until that stop has ended.
    var removalConflict: String? {
        guard removal != nil else { return nil }
        return "\(identifier) is being stopped for its removal from the plugin folders; try again once the reload has settled"
    }

    /// Where a plugin a rescan found gone is in its removal (Lifecycle/Stopping.swift,
    /// `stopRemoved`; Lifecycle/Rescan.swift).
    enum Removal {
        /// Forgotten once stopped.
        case forgetting
        /// A later rescan found its bundle again, as `manifest` (`refused`: why it cannot start):
        /// a new record takes its place once it has stopped, with the requests that waited for it.
        case addingBack(Manifest, refused: String?)

        var asRescanReadsIt: RescanPlan.Removal {
            switch self {
            case .forgetting: .underWay
            case .addingBack: .foundAgain
            }
        }
    }
}
