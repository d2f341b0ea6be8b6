import PluginProtocol

/// The supervisor's name for `Guarded` (PluginProtocol), the one lock class: a value behind a
/// pthread mutex that the thread sanitizer sees.
public typealias Locked = Guarded
