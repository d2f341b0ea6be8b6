import Bundles
import Crypto
#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif

/// SHA-256 digests and Ed25519 signatures over archive bytes, checked against trusted publisher keys.
public struct Integrity: Sendable {
    /// Raw 32-byte Ed25519 public keys, from the config's `trustedKeys` (base64).
    public var trustedKeys: [Data]

    public init(trustedKeys base64: [String]) throws {
        trustedKeys = try base64.enumerated().map { i, text in
            guard let raw = Data(base64Encoded: text), (try? Curve25519.Signing.PublicKey(rawRepresentation: raw)) != nil else {
                throw InstallError(.integrityFailed, "trustedKeys[\(i)] is not a base64 Ed25519 public key (32 bytes)")
            }
            return raw
        }
    }

    public static func sha256Hex(_ bytes: [UInt8]) -> String {
        SHA256.hash(data: bytes).map { String(format: "%02x", $0) }.joined()
    }

    /// Checks the digest (when given) and the signature against the trusted keys.
    public func verify(_ bytes: [UInt8], sha256: String?, signature: String?, what: String) throws {
        if let sha256 {
            let actual = Self.sha256Hex(bytes)
            guard actual == sha256.lowercased() else {
                throw InstallError(.integrityFailed, "\(what): SHA-256 mismatch (expected \(sha256), got \(actual)); the download is corrupt or was tampered with")
            }
        }
        guard let signature else { throw InstallError(.integrityFailed, "\(what): no signature; refusing an unsigned plugin") }
        guard let raw = Data(base64Encoded: signature.trimmingCharacters(in: .whitespacesAndNewlines)) else {
            throw InstallError(.integrityFailed, "\(what): the signature is not base64")
        }
        guard !trustedKeys.isEmpty else {
            throw InstallError(.integrityFailed, "\(what): no trusted publisher keys are configured (config key trustedKeys)")
        }
        let keys = trustedKeys.compactMap { try? Curve25519.Signing.PublicKey(rawRepresentation: $0) }
        guard keys.contains(where: { $0.isValidSignature(raw, for: bytes) }) else {
            throw InstallError(.integrityFailed, "\(what): the signature is not from a trusted publisher key")
        }
    }
}
