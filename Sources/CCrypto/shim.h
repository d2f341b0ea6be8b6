// Ed25519 and SHA-256 from the system's OpenSSL (libcrypto, which libcurl loads anyway): the four
// operations the installer and the publisher need, each one call so Swift sees no OpenSSL types.
#ifndef SP_CCRYPTO_SHIM_H
#define SP_CCRYPTO_SHIM_H

#include <openssl/evp.h>
#include <openssl/rand.h>
#include <stddef.h>
#include <stdint.h>

/// 32 random bytes from the system's generator: a new Ed25519 private key. 1 on success.
static inline int sp_ed25519_generate(uint8_t privateKey[32]) {
    return RAND_bytes(privateKey, 32) == 1;
}

/// The public key of a raw 32-byte private key. 1 on success.
static inline int sp_ed25519_public_key(const uint8_t privateKey[32], uint8_t publicKey[32]) {
    EVP_PKEY *key = EVP_PKEY_new_raw_private_key(EVP_PKEY_ED25519, NULL, privateKey, 32);
    if (key == NULL) return 0;
    size_t length = 32;
    int ok = EVP_PKEY_get_raw_public_key(key, publicKey, &length) == 1 && length == 32;
    EVP_PKEY_free(key);
    return ok;
}

/// The 64-byte signature of `message` by a raw 32-byte private key. 1 on success.
static inline int sp_ed25519_sign(const uint8_t privateKey[32], const uint8_t *message, size_t length, uint8_t signature[64]) {
    EVP_PKEY *key = EVP_PKEY_new_raw_private_key(EVP_PKEY_ED25519, NULL, privateKey, 32);
    if (key == NULL) return 0;
    EVP_MD_CTX *context = EVP_MD_CTX_new();
    size_t signatureLength = 64;
    int ok = context != NULL
        && EVP_DigestSignInit(context, NULL, NULL, NULL, key) == 1
        && EVP_DigestSign(context, signature, &signatureLength, message, length) == 1
        && signatureLength == 64;
    EVP_MD_CTX_free(context);
    EVP_PKEY_free(key);
    return ok;
}

/// 1 when a raw 32-byte public key is one OpenSSL accepts as Ed25519.
static inline int sp_ed25519_valid_public_key(const uint8_t publicKey[32]) {
    EVP_PKEY *key = EVP_PKEY_new_raw_public_key(EVP_PKEY_ED25519, NULL, publicKey, 32);
    if (key == NULL) return 0;
    EVP_PKEY_free(key);
    return 1;
}

/// 1 when `signature` (64 bytes) is the Ed25519 signature of `message` by the raw public key.
static inline int sp_ed25519_verify(const uint8_t publicKey[32], const uint8_t *message, size_t length, const uint8_t signature[64]) {
    EVP_PKEY *key = EVP_PKEY_new_raw_public_key(EVP_PKEY_ED25519, NULL, publicKey, 32);
    if (key == NULL) return 0;
    EVP_MD_CTX *context = EVP_MD_CTX_new();
    int ok = context != NULL
        && EVP_DigestVerifyInit(context, NULL, NULL, NULL, key) == 1
        && EVP_DigestVerify(context, signature, 64, message, length) == 1;
    EVP_MD_CTX_free(context);
    EVP_PKEY_free(key);
    return ok;
}

/// The SHA-256 digest of `bytes`. 1 on success.
static inline int sp_sha256(const uint8_t *bytes, size_t length, uint8_t digest[32]) {
    unsigned int digestLength = 32;
    return EVP_Digest(bytes, length, digest, &digestLength, EVP_sha256(), NULL) == 1 && digestLength == 32;
}

#endif
