import Bundles
import SupervisorCore

extension PluginRecord {
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
