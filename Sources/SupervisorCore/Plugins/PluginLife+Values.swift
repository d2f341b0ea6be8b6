import BundleModel
import PluginProtocol

/// What a plugin's life takes in and gives back (PluginLife.swift): how a worker ended, what else
/// the supervisor knew then, and the actions for the driver.
extension PluginLife {
    /// How a worker that served the plugin ended (its exit classified, ExitClassifier).
    package struct Ending: Sendable {
        package var status: ExitStatus
        /// The exit as the log and `lastError` say it.
        package var described: String
        /// A crash, a kill or a failing exit code (not a clean exit, not a stop).
        package var abnormal: Bool
        /// It was being stopped on purpose.
        package var afterStop: Bool
        /// It had answered `startup`.
        package var everRan: Bool

        package init(status: ExitStatus, described: String, abnormal: Bool, afterStop: Bool, everRan: Bool) {
            self.status = status
            self.described = described
            self.abnormal = abnormal
            self.afterStop = afterStop
            self.everRan = everRan
        }
    }

    /// What else the supervisor knows at that moment.
    package struct Circumstances: Sendable {
        package var identifier: String
        package var restartPolicy: Manifest.RestartPolicy
        package var shuttingDown = false
        /// A new version (an update) is coming up beside the worker that ended.
        package var successorComing = false
        /// The worker was stopped because the plugin was idle (`idleStopMs`, SPEC §16), for this long.
        package var idleStopAfterMs: Int?
        /// An update of this plugin is within its grace period (it can be rolled back).
        package var updateGraceOpen = false
        /// Every dependency of the plugin runs now.
        package var dependenciesRunning = false
        /// It starts only when something needs it (`activation: onCall`, SPEC §16).
        package var onCall = false

        package init(identifier: String, restartPolicy: Manifest.RestartPolicy, shuttingDown: Bool = false,
                     successorComing: Bool = false, updateGraceOpen: Bool = false, idleStopAfterMs: Int? = nil,
                     dependenciesRunning: Bool = false, onCall: Bool = false) {
            self.identifier = identifier
            self.restartPolicy = restartPolicy
            self.shuttingDown = shuttingDown
            self.successorComing = successorComing
            self.updateGraceOpen = updateGraceOpen
            self.idleStopAfterMs = idleStopAfterMs
            self.dependenciesRunning = dependenciesRunning
            self.onCall = onCall
        }
    }

    /// What the driver does, in the order given.
    package enum Action: Equatable, Sendable {
        /// Tell the programs that listen (the `exited` host event); the plugin has no worker now.
        case announceExit(ExitStatus)
        case log(LogLevel, String)
        /// Run the callbacks of whoever stopped the worker or waited for its end.
        case runExitCallbacks
        /// Tell whoever waits for the plugin to run how it went (nil: it runs).
        case settleWaiters(String?)
        /// Tell the programs that listen it failed (`problem` or `lastError` says why).
        case announceFailed
        /// Plugins waiting for this one may now start, or be failed.
        case startWaitingPlugins
        /// Put the previous version back (the update's grace period is open); if that cannot be
        /// done, the driver gives `rollBackFailed` and the restart policy decides.
        case rollBackUpdate(crash: String)
        /// Count the restart, tell the listeners, and arm a timer for `restartDue` (0: at once).
        case scheduleRestart(delayMs: Int, reason: String)
        /// The ready line may be printed (it waits for first starts, not restarts).
        case checkLaunch
        /// A standby worker spawned ahead of a restart is not needed.
        case discardStandby(because: String)
        /// Start its next worker; after a crash, a standby spawned ahead of the restart is taken if one waits.
        case spawn(takingStandby: Bool)
        /// Tell the programs that listen it started (the `started` host event, with its worker's pid).
        case announceStarted
        /// Its new worker takes what waited for it; `restarted`: its dependents hear it restarted.
        case serveAgain(restarted: Bool)
        /// Stop its worker (a plugin failed by its dependency has no use for one).
        case stop
        /// Tell the programs that listen it was updated (the `updated` host event), from this version.
        case announceUpdated(from: String)
        /// Tell the programs that listen it was activated (the `activated` host event), by what.
        case announceActivated(by: String)
        /// Tell the programs that listen it is `inactive` until needed (`deactivated`): stopped for
        /// being idle this long, or (nil) a reload found a failed or stopped plugin's bundle fixed.
        case announceDeactivated(idleMs: Int?)
        /// Requests that came while its idle stop drained wait for it: it is activated again for them.
        case activateIfAwaited
    }
}
