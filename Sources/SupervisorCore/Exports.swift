// The values the core decides about come with it: a user of `SupervisorCore` (the supervisor's
// driver, the core's tests) sees manifests, messages and the protocol's vocabulary without naming
// their modules.
@_exported import BundleModel
@_exported import PluginProtocol
