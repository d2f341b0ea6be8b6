// What a program that calls plugins handles comes with the client: `ErrorBody` (what every call
// throws), `ErrorCode`, `PluginStream`, without `import PluginProtocol`. `PluginHost` exports it too.
@_exported import PluginProtocol
