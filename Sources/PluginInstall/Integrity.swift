import Bundles
#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif

/// SHA-256 digests and Ed25519 signatures over archive bytes, checked against trusted publisher keys.
public struct Integrity: Sendable {
    /// Raw 32-byte Ed25519 public keys, from the config's `trustedKeys` (base64).
    public var trustedKeys: [Data]
    /// When a trusted key stops being accepted (its index in `trustedKeys` → when, as given).
    public var expiries: [Int: Expiry] = [:]

    public struct Expiry: Sendable {
        public var date: Date
        public var text: String
    }
    /// Keys revoked by the config's `revokedKeys`: never accepted, even if also trusted.
    public var revokedKeys: [Data] = []
    /// The time signatures are judged at.
    public var now = Date()

    public init(trustedKeys base64: [String], expiries: [String: String] = [:], revoked: [String] = []) throws {
        trustedKeys = try base64.enumerated().map { i, text in
            guard let raw = Data(base64Encoded: text), (try? Ed25519.PublicKey(rawRepresentation: raw)) != nil else {
                throw InstallError(.integrityFailed, "trustedKeys[\(i)] is not a base64 Ed25519 public key (32 bytes)")
            }
            return raw
        }
        for (i, text) in base64.enumerated() {
            guard let expires = expiries[text] else { continue }
            guard let date = RFC3339.date(expires) else {
                throw InstallError(.integrityFailed, "trustedKeys[\(i)]: expires '\(expires)' is not an RFC 3339 time")
            }
            self.expiries[i] = Expiry(date: date, text: expires)
        }
        revokedKeys = try revoked.enumerated().map { i, text in
            guard let raw = Data(base64Encoded: text), raw.count == 32 else {
                throw InstallError(.integrityFailed, "revokedKeys[\(i)] is not a base64 Ed25519 public key (32 bytes)")
            }
            return raw
        }
    }

    /// How one signature over `bytes` stands against the configured keys.
    enum Verdict: Equatable {
        case accepted
        /// It verifies, but only with keys that are revoked or expired (named in the reason).
        case refused(String)
        case untrusted
    }

    /// A short name of a key for messages: the first 12 characters of its base64.
    static func keyName(_ raw: Data) -> String { String(raw.base64EncodedString().prefix(12)) + "…" }

    func judge(_ signature: Data, over bytes: [UInt8]) -> Verdict {
        var refusals: [String] = []
        for (i, raw) in trustedKeys.enumerated() {
            guard let key = try? Ed25519.PublicKey(rawRepresentation: raw), key.isValidSignature(signature, for: bytes) else { continue }
            if revokedKeys.contains(raw) {
                refusals.append("key \(Self.keyName(raw)) is revoked (revokedKeys)")
            } else if let expiry = expiries[i], expiry.date <= now {
                refusals.append("key \(Self.keyName(raw)) expired at \(expiry.text)")
            } else {
                return .accepted
            }
        }
        for raw in revokedKeys where !trustedKeys.contains(raw) {
            if let key = try? Ed25519.PublicKey(rawRepresentation: raw), key.isValidSignature(signature, for: bytes) {
                refusals.append("key \(Self.keyName(raw)) is revoked (revokedKeys)")
            }
        }
        return refusals.isEmpty ? .untrusted : .refused(refusals.joined(separator: "; "))
    }

    /// A `.sig` file's signatures as text: one base64 signature a line, or, for a file of exactly 64
    /// bytes, the one raw Ed25519 signature it is (as `openssl pkeyutl -sign` and most libraries
    /// write one), in base64. No text of 64 bytes can hold a signature: one in base64 is 88.
    public static func signatureText(_ file: [UInt8]) -> String {
        file.count == 64 ? Data(file).base64EncodedString() : String(decoding: file, as: UTF8.self)
    }

    /// A catalog's `.sig`: one base64 signature a line (a catalog may be signed by several keys while
    /// a publisher rotates them). Accepted when one line verifies with a trusted, current, unrevoked key.
    public func verifyCatalog(_ bytes: [UInt8], signatures text: String, url: String) throws {
        let lines = text.split(whereSeparator: \.isNewline).map { $0.trimmingWhitespace() }.filter { !$0.isEmpty }
        guard !lines.isEmpty else { throw InstallError(.catalogUnsigned, "\(url).sig holds no signature") }
        guard !trustedKeys.isEmpty else {
            throw InstallError(.catalogUnsigned, "the catalog at \(url) is signed, but no trusted publisher keys are configured (config key trustedKeys)")
        }
        var refusals: [String] = []
        var undecodable = 0
        for line in lines {
            guard let raw = Data(base64Encoded: line), raw.count == 64 else { undecodable += 1; continue }
            switch judge(raw, over: bytes) {
            case .accepted: return
            case .refused(let why): refusals.append(why)
            case .untrusted: break
            }
        }
        if !refusals.isEmpty {
            throw InstallError(.catalogUnsigned, "the catalog at \(url) is signed only by keys no longer accepted: \(refusals.joined(separator: "; "))")
        }
        throw InstallError(.catalogUnsigned, "the catalog at \(url) is not signed by a trusted publisher key"
                           + (undecodable > 0 ? " (\(undecodable) line(s) of its .sig are not base64 Ed25519 signatures)" : "")
                           + "; it was changed, or signed by a key this host does not trust")
    }

    public static func sha256Hex(_ bytes: [UInt8]) -> String {
        let digits = Array("0123456789abcdef".utf8)
        return String(decoding: SHA256.hash(data: bytes).flatMap { [digits[Int($0 >> 4)], digits[Int($0 & 15)]] }, as: UTF8.self)
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
        guard let raw = Data(base64Encoded: signature.trimmingWhitespace()) else {
            throw InstallError(.integrityFailed, "\(what): the signature is not base64")
        }
        guard !trustedKeys.isEmpty else {
            throw InstallError(.integrityFailed, "\(what): no trusted publisher keys are configured (config key trustedKeys)")
        }
        switch judge(raw, over: bytes) {
        case .accepted: return
        case .refused(let why): throw InstallError(.integrityFailed, "\(what): signed by a key no longer accepted: \(why)")
        case .untrusted: throw InstallError(.integrityFailed, "\(what): the signature is not from a trusted publisher key")
        }
    }
}
