/// A manifest permission (SPEC §2, §5): what the sandbox lets through beyond the base policy.
/// Parsed once, from the manifest; travels to the worker in its spec as the same text.
public enum Permission: Sendable, Hashable, Codable, CustomStringConvertible {
    /// AF_INET/AF_INET6 sockets, and the resolver's files.
    case network
    /// Read-only access beneath an absolute path.
    case read(String)
    /// Read-write access beneath an absolute path.
    case write(String)
    /// Calls to a method the host program provides (`call` with `target: "@host"`, SPEC §12):
    /// one method by name, or `*` for every one. Nothing in the sandbox changes.
    case hostCall(String)

    static let readPrefix = "filesystem.read:"
    static let writePrefix = "filesystem.write:"
    static let hostCallPrefix = "host.call:"

    /// Parses `network`, `filesystem.read:<absolute path>`, `filesystem.write:<absolute path>` or
    /// `host.call:<method>` (`host.call:*`).
    public init?(_ text: String) {
        if text == "network" { self = .network; return }
        if text.hasPrefix(Self.hostCallPrefix) {
            let method = text.dropFirst(Self.hostCallPrefix.count)
            guard !method.isEmpty, method.utf8.count <= 256, !method.contains(where: { $0.isWhitespace || $0.isNewline }) else { return nil }
            self = .hostCall(String(method))
            return
        }
        for (prefix, make) in [(Self.readPrefix, Permission.read), (Self.writePrefix, Permission.write)] where text.hasPrefix(prefix) {
            let path = String(text.dropFirst(prefix.count))
            guard path.hasPrefix("/"), !path.split(separator: "/").contains("..") else { return nil }
            self = make(path)
            return
        }
        return nil
    }

    public var description: String {
        switch self {
        case .network: return "network"
        case .read(let path): return Self.readPrefix + path
        case .write(let path): return Self.writePrefix + path
        case .hostCall(let method): return Self.hostCallPrefix + method
        }
    }

    public static let known = "network, filesystem.read:<absolute path>, filesystem.write:<absolute path>, host.call:<method> (or host.call:*)"

    /// Whether these permissions let a plugin call the host method `method`.
    public static func allowsHostCall(_ method: String, in permissions: [Permission]) -> Bool {
        permissions.contains { if case .hostCall(let m) = $0 { return m == "*" || m == method } else { return false } }
    }

    public init(from decoder: any Decoder) throws {
        let text = try decoder.singleValueContainer().decode(String.self)
        guard let permission = Permission(text) else {
            throw DecodingError.dataCorrupted(.init(codingPath: decoder.codingPath, debugDescription: "unknown permission '\(text)'; known: \(Self.known)"))
        }
        self = permission
    }

    public func encode(to encoder: any Encoder) throws {
        var container = encoder.singleValueContainer()
        try container.encode(description)
    }
}
