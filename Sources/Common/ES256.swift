internal import COpenSSL
import Foundation

/// ECDSA P-256 with SHA-256 as JWT's ES256 uses it: signatures are the raw 64-byte r‖s (RFC 7518 §3.4), not
/// OpenSSL's DER. Keys are PEM: Apple's .p8 is a PKCS#8 private key.
public enum ES256 {
    public struct KeyError: Error, Sendable, CustomStringConvertible {
        public let description: String
        public init(description: String) { self.description = description }
    }

    /// A private signing key. Owns its `EVP_PKEY`.
    public final class PrivateKey: @unchecked Sendable {
        // @unchecked Sendable: the EVP_PKEY is never modified after loading; OpenSSL allows concurrent signing with
        // one key as long as each operation uses its own EVP_MD_CTX, which `sign` does.
        fileprivate let key: OpaquePointer

        /// Loads a PEM private key (PKCS#8 `BEGIN PRIVATE KEY`, as Apple's .p8, or `BEGIN EC PRIVATE KEY`).
        public init(pem: [UInt8]) throws(KeyError) {
            guard
                let loaded = pem.withUnsafeBytes({ raw -> OpaquePointer? in
                    guard let bio = BIO_new_mem_buf(raw.baseAddress, Int32(raw.count)) else { return nil }
                    defer { BIO_free(bio) }
                    return PEM_read_bio_PrivateKey(bio, nil, nil, nil)
                })
            else { throw KeyError(description: "not a PEM private key") }
            guard EVP_PKEY_get_base_id(loaded) == EVP_PKEY_EC, EVP_PKEY_get_bits(loaded) == 256 else {
                EVP_PKEY_free(loaded)
                throw KeyError(description: "not a P-256 (ES256) key")
            }
            key = loaded
        }

        deinit { EVP_PKEY_free(key) }

        /// The raw r‖s signature of SHA-256(`message`).
        public func sign(_ message: [UInt8]) throws(KeyError) -> [UInt8] {
            guard let context = EVP_MD_CTX_new() else { throw KeyError(description: "out of memory") }
            defer { EVP_MD_CTX_free(context) }
            guard EVP_DigestSignInit(context, nil, EVP_sha256(), nil, key) == 1 else { throw KeyError(description: "sign init failed") }
            var length = 0
            guard EVP_DigestSign(context, nil, &length, message, message.count) == 1 else { throw KeyError(description: "sign failed") }
            var der = [UInt8](repeating: 0, count: length)
            guard EVP_DigestSign(context, &der, &length, message, message.count) == 1 else { throw KeyError(description: "sign failed") }
            return try ES256.raw(fromDER: Array(der.prefix(length)))
        }
    }

    /// A public verification key.
    public final class PublicKey: @unchecked Sendable {
        // @unchecked Sendable: immutable after loading; each verification uses its own EVP_MD_CTX.
        fileprivate let key: OpaquePointer

        /// Loads a PEM public key (`BEGIN PUBLIC KEY`), or derives it from a PEM private key.
        public init(pem: [UInt8]) throws(KeyError) {
            func read(_ reader: (OpaquePointer) -> OpaquePointer?) -> OpaquePointer? {
                pem.withUnsafeBytes { raw -> OpaquePointer? in
                    guard let bio = BIO_new_mem_buf(raw.baseAddress, Int32(raw.count)) else { return nil }
                    defer { BIO_free(bio) }
                    return reader(bio)
                }
            }
            let loaded = read { PEM_read_bio_PUBKEY($0, nil, nil, nil) } ?? read { PEM_read_bio_PrivateKey($0, nil, nil, nil) }
            guard let loaded else { throw KeyError(description: "not a PEM key") }
            guard EVP_PKEY_get_base_id(loaded) == EVP_PKEY_EC else {
                EVP_PKEY_free(loaded)
                throw KeyError(description: "not an EC key")
            }
            key = loaded
        }

        deinit { EVP_PKEY_free(key) }

        /// Whether `signature` (raw r‖s) is a valid signature of `message`.
        public func verify(_ signature: [UInt8], of message: [UInt8]) -> Bool {
            guard signature.count == 64, let der = try? ES256.der(fromRaw: signature) else { return false }
            guard let context = EVP_MD_CTX_new() else { return false }
            defer { EVP_MD_CTX_free(context) }
            guard EVP_DigestVerifyInit(context, nil, EVP_sha256(), nil, key) == 1 else { return false }
            return EVP_DigestVerify(context, der, der.count, message, message.count) == 1
        }
    }

    static func raw(fromDER der: [UInt8]) throws(KeyError) -> [UInt8] {
        // d2i reads through a pointer it advances; it is only used inside the closure that keeps the array alive.
        let parsed = der.withUnsafeBufferPointer { buffer -> OpaquePointer? in
            var pointer: UnsafePointer<UInt8>? = buffer.baseAddress
            return d2i_ECDSA_SIG(nil, &pointer, buffer.count)
        }
        guard let signature = parsed else { throw KeyError(description: "bad DER signature") }
        defer { ECDSA_SIG_free(signature) }
        var r: OpaquePointer?
        var s: OpaquePointer?
        ECDSA_SIG_get0(signature, &r, &s)
        var out = [UInt8](repeating: 0, count: 64)
        guard BN_bn2binpad(r, &out, 32) == 32, out.withUnsafeMutableBufferPointer({ BN_bn2binpad(s, $0.baseAddress! + 32, 32) }) == 32
        else { throw KeyError(description: "bad signature size") }
        return out
    }

    static func der(fromRaw raw: [UInt8]) throws(KeyError) -> [UInt8] {
        guard let signature = ECDSA_SIG_new() else { throw KeyError(description: "out of memory") }
        defer { ECDSA_SIG_free(signature) }
        let r = raw.withUnsafeBufferPointer { BN_bin2bn($0.baseAddress, 32, nil) }
        let s = raw.withUnsafeBufferPointer { BN_bin2bn($0.baseAddress! + 32, 32, nil) }
        // ECDSA_SIG_set0 takes ownership of r and s.
        guard ECDSA_SIG_set0(signature, r, s) == 1 else { throw KeyError(description: "bad signature") }
        let length = i2d_ECDSA_SIG(signature, nil)
        guard length > 0 else { throw KeyError(description: "bad signature") }
        var out = [UInt8](repeating: 0, count: Int(length))
        _ = out.withUnsafeMutableBufferPointer { buffer in
            var cursor: UnsafeMutablePointer<UInt8>? = buffer.baseAddress
            return i2d_ECDSA_SIG(signature, &cursor)
        }
        return out
    }
}
