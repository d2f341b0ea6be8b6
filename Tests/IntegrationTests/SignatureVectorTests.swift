import Foundation
import PluginInstall
import Testing

/// The installer's Ed25519 and SHA-256 against the published test vectors, so that a signature made
/// elsewhere (any RFC 8032 implementation) verifies here and one made here verifies elsewhere.
@Suite struct SignatureVectorTests {
    static func bytes(_ hex: String) -> [UInt8] {
        var out: [UInt8] = []
        var index = hex.startIndex
        while index < hex.endIndex {
            let next = hex.index(index, offsetBy: 2)
            out.append(UInt8(hex[index..<next], radix: 16)!)
            index = next
        }
        return out
    }

    @Test("RFC 8032 §7.1, tests 1 and 3: the public key, the signature, and its verification")
    func rfc8032() throws {
        let vectors: [(secret: String, public: String, message: String, signature: String)] = [
            ("9d61b19deffd5a60ba844af492ec2cc44449c5697b326919703bac031cae7f60",
             "d75a980182b10ab7d54bfed3c964073a0ee172f3daa62325af021a68f707511a", "",
             "e5564300c360ac729086e2cc806e828a84877f1eb8e5d974d873e065224901555fb8821590a33bacc61e39701cf9b46bd25bf5f0595bbe24655141438e7a100b"),
            ("c5aa8df43f9f837bedb7442f31dcb7b166d38535076f094b85ce3a2e0b4458f7",
             "fc51cd8e6218a1a38da47ed00230f0580816ed13ba3303ac5deb911548908025", "af82",
             "6291d657deec24024827e69c3abe01a30ce548a284743a445e3680d7db5ac3ac18ff9b538d16f290ae67f760984dc6594a7c15e9716ed28dc027beceea1ec40a"),
        ]
        for vector in vectors {
            let key = try Ed25519.PrivateKey(rawRepresentation: Data(Self.bytes(vector.secret)))
            #expect([UInt8](key.publicKey.rawRepresentation) == Self.bytes(vector.public))
            let message = Self.bytes(vector.message)
            let signature = try key.signature(for: message)
            #expect([UInt8](signature) == Self.bytes(vector.signature))
            #expect(key.publicKey.isValidSignature(signature, for: message))
            var altered = [UInt8](signature)
            altered[0] ^= 1
            #expect(!key.publicKey.isValidSignature(Data(altered), for: message))
            #expect(!key.publicKey.isValidSignature(signature, for: message + [0]))
            #expect(!key.publicKey.isValidSignature(signature.prefix(63), for: message))
        }
        #expect(throws: Ed25519.KeyError.self) { try Ed25519.PrivateKey(rawRepresentation: Data(count: 31)) }
        #expect(throws: Ed25519.KeyError.self) { try Ed25519.PublicKey(rawRepresentation: Data(count: 33)) }
    }

    @Test("SHA-256 of FIPS 180-4's examples")
    func sha256() {
        #expect(Integrity.sha256Hex(Array("abc".utf8)) == "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad")
        #expect(Integrity.sha256Hex([]) == "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855")
    }
}
