// A host program needs only `import PluginHost`: the errors its calls throw (`ErrorBody`), the
// protocol's vocabulary, and the calls it shares with `SupervisorClient` (`PluginCaller`) come with it.
@_exported import PluginProtocol
@_exported import SupervisorClient
