import CCrypto
#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif

/// Ed25519 keys and signatures (RFC 8032) from the system's libcrypto: what catalogs and archives
/// are signed with (SPEC §9). Keys travel as their raw 32 bytes, signatures as their 64.
public enum Ed25519 {
    /// Why a key could not be made or used.
    public struct KeyError: Error, CustomStringConvertible {
        public var description: String
    }

    public struct PrivateKey: Sendable {
        /// The raw 32-byte private key (the seed of RFC 8032).
        public let rawRepresentation: Data
        /// Its public key, worked out when the key is made.
        public let publicKey: PublicKey

        /// A new key from the system's random generator (which fails only when the kernel has no
        /// entropy source at all: then there is nothing to sign with).
        public init() {
            var seed = [UInt8](repeating: 0, count: 32)
            precondition(sp_ed25519_generate(&seed) == 1, "the system's random generator gave no bytes")
            // Any 32 bytes are an Ed25519 private key.
            try! self.init(rawRepresentation: Data(seed))
        }

        public init(rawRepresentation raw: Data) throws {
            guard raw.count == 32 else { throw KeyError(description: "an Ed25519 private key is 32 bytes, not \(raw.count)") }
            let seed = [UInt8](raw)
            var key = [UInt8](repeating: 0, count: 32)
            guard sp_ed25519_public_key(seed, &key) == 1 else { throw KeyError(description: "libcrypto refused the private key") }
            rawRepresentation = raw
            publicKey = try PublicKey(rawRepresentation: Data(key))
        }

        /// The 64-byte signature of `bytes`.
        public func signature<Bytes: Collection>(for message: Bytes) throws -> Data where Bytes.Element == UInt8 {
            let bytes = Array(message)
            var signature = [UInt8](repeating: 0, count: 64)
            let seed = [UInt8](rawRepresentation)
            guard sp_ed25519_sign(seed, bytes, bytes.count, &signature) == 1 else { throw KeyError(description: "libcrypto could not sign") }
            return Data(signature)
        }
    }

    public struct PublicKey: Sendable {
        /// The raw 32-byte public key.
        public let rawRepresentation: Data

        public init(rawRepresentation raw: Data) throws {
            guard raw.count == 32, sp_ed25519_valid_public_key([UInt8](raw)) == 1 else {
                throw KeyError(description: "not a raw 32-byte Ed25519 public key")
            }
            rawRepresentation = raw
        }

        /// Whether `signature` is this key's signature of `bytes`.
        public func isValidSignature<Bytes: Collection>(_ signature: Data, for message: Bytes) -> Bool where Bytes.Element == UInt8 {
            let bytes = Array(message)
            guard signature.count == 64 else { return false }
            return sp_ed25519_verify([UInt8](rawRepresentation), bytes, bytes.count, [UInt8](signature)) == 1
        }
    }
}

/// SHA-256 (FIPS 180-4) from the system's libcrypto: the digests catalogs give for archives.
public enum SHA256 {
    /// The 32-byte digest of `bytes`.
    public static func hash<Bytes: Collection>(data bytes: Bytes) -> [UInt8] where Bytes.Element == UInt8 {
        let input = Array(bytes)
        var digest = [UInt8](repeating: 0, count: 32)
        // EVP_Digest fails only when libcrypto cannot allocate: then nothing else would run either.
        precondition(sp_sha256(input, input.count, &digest) == 1, "libcrypto's SHA-256 failed")
        return digest
    }
}

extension StringProtocol {
    /// Without the spaces, tabs and line ends at either end (keys and signatures as files hold them).
    func trimmingWhitespace() -> String {
        var s = self[...]
        while let c = s.last, c == " " || c == "\t" || c == "\n" || c == "\r" { s = s.dropLast() }
        while let c = s.first, c == " " || c == "\t" || c == "\n" || c == "\r" { s = s.dropFirst() }
        return String(s)
    }
}
