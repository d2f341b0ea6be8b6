// The values the core decides about come with it: a user of `SupervisorCore` (the supervisor's
// driver, the core's tests) sees manifests, messages, the protocol's vocabulary and the caller's
// side of a call (`CallTracking`) without naming their modules.
@_exported import BundleModel
@_exported import CallTracking
@_exported import PluginProtocol
