/// A manifest permission (SPEC §2, §5): what the sandbox lets through beyond the base policy.
/// Parsed once, from the manifest; travels to the worker in its spec as the same text.
public enum Permission: Sendable, Hashable, Codable, CustomStringConvertible {
    /// AF_INET/AF_INET6 sockets, and the resolver's files.
    case network
    /// Read-only access beneath an absolute path.
    case read(String)
    /// Read-write access beneath an absolute path.
    case write(String)

    static let readPrefix = "filesystem.read:"
    static let writePrefix = "filesystem.write:"

    /// Parses `network`, `filesystem.read:<absolute path>` or `filesystem.write:<absolute path>`.
    public init?(_ text: String) {
        if text == "network" { self = .network; return }
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
        }
    }

    public static let known = "network, filesystem.read:<absolute path>, filesystem.write:<absolute path>"

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
