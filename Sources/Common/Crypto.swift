internal import COpenSSL

/// The few cryptographic primitives the relay needs outside TLS, all from OpenSSL 3.
public enum Crypto {
    public struct RandomnessUnavailable: Error, Sendable, CustomStringConvertible {
        public var description: String { "the system random number generator failed" }
    }

    /// `count` bytes from OpenSSL's CSPRNG (`RAND_bytes`, seeded from the kernel's getrandom).
    /// Throws rather than returning weak bytes when the generator is not seeded.
    public static func randomBytes(_ count: Int) throws(RandomnessUnavailable) -> [UInt8] {
        var bytes = [UInt8](repeating: 0, count: count)
        let ok = bytes.withUnsafeMutableBufferPointer { RAND_bytes($0.baseAddress, Int32($0.count)) }
        guard ok == 1 else { throw RandomnessUnavailable() }
        return bytes
    }

    /// SHA-256 of `bytes`.
    public static func sha256(_ bytes: [UInt8]) -> [UInt8] {
        var digest = [UInt8](repeating: 0, count: Int(SHA256_DIGEST_LENGTH))
        bytes.withUnsafeBufferPointer { input in
            digest.withUnsafeMutableBufferPointer { output in
                // EVP_Digest with EVP_sha256 cannot fail for in-memory input other than on allocation failure.
                let ok = EVP_Digest(input.baseAddress, input.count, output.baseAddress, nil, EVP_sha256(), nil)
                precondition(ok == 1, "EVP_Digest(SHA-256) failed")
            }
        }
        return digest
    }

    /// SHA-256 of the UTF-8 bytes of `text`, as 64 lower-case hex characters.
    public static func sha256Hex(_ text: String) -> String { Hex.encode(sha256(Array(text.utf8))) }

    /// Compares without an early exit, so the time taken does not reveal where two secrets differ.
    /// Lengths are public (hashes and tokens have fixed lengths), so a length mismatch may return at once.
    public static func constantTimeEqual(_ a: [UInt8], _ b: [UInt8]) -> Bool {
        guard a.count == b.count else { return false }
        return a.withUnsafeBytes { pa in b.withUnsafeBytes { pb in CRYPTO_memcmp(pa.baseAddress, pb.baseAddress, a.count) == 0 } }
    }

    /// The OpenSSL version this process runs with, e.g. `OpenSSL 3.0.15 3 Sep 2024`.
    public static var openSSLVersion: String { String(cString: OpenSSL_version(OPENSSL_VERSION)) }
}

/// Lower-case hexadecimal.
public enum Hex {
    private static let digits = Array("0123456789abcdef".utf8)

    public static func encode(_ bytes: [UInt8]) -> String {
        var out = [UInt8]()
        out.reserveCapacity(bytes.count * 2)
        for byte in bytes {
            out.append(digits[Int(byte >> 4)])
            out.append(digits[Int(byte & 0x0f)])
        }
        return String(decoding: out, as: UTF8.self)
    }
}
