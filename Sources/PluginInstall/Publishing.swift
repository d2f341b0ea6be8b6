import Bundles
#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif

/// The publisher's side of SPEC §9: keys, and detached Ed25519 signatures over archives and
/// catalogs (`supervisor-installer keygen|sign`, docs/install.md#publishing).
public enum Publishing {
    /// A new key pair: the private key and the public key, both base64 of their raw 32 bytes.
    public static func generateKey() -> (privateKey: String, publicKey: String) {
        let key = Ed25519.PrivateKey()
        return (key.rawRepresentation.base64EncodedString(), key.publicKey.rawRepresentation.base64EncodedString())
    }

    /// The base64 signature of `bytes` by the private key (base64 of its raw 32 bytes).
    public static func sign(_ bytes: [UInt8], privateKey base64: String) throws -> String {
        guard let raw = Data(base64Encoded: base64.trimmingWhitespace()),
              let key = try? Ed25519.PrivateKey(rawRepresentation: raw) else {
            throw InstallError(.integrityFailed, "the private key is not base64 of a raw 32-byte Ed25519 key (as `supervisor-installer keygen` writes)")
        }
        return try key.signature(for: bytes).base64EncodedString()
    }

    /// The public key (base64) of a private key (base64), for the config's `trustedKeys`.
    public static func publicKey(of base64: String) throws -> String {
        guard let raw = Data(base64Encoded: base64.trimmingWhitespace()),
              let key = try? Ed25519.PrivateKey(rawRepresentation: raw) else {
            throw InstallError(.integrityFailed, "the private key is not base64 of a raw 32-byte Ed25519 key")
        }
        return key.publicKey.rawRepresentation.base64EncodedString()
    }
}
