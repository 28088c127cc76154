/// Device ids (SPEC §2.1): 14 characters from the 64-character URL-safe alphabet, drawn from the CSPRNG (84 bits).
/// The id is the only secret in a webhook URL.
public enum DeviceID {
    public static let length = 14
    public static let alphabet = Array("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_")

    public static func generate() throws(Crypto.RandomnessUnavailable) -> String {
        // 64 symbols: masking a uniformly random byte with 63 keeps the choice uniform.
        String(try Crypto.randomBytes(length).map { alphabet[Int($0 & 63)] })
    }

    /// True for text that could be a device id; anything else is answered without touching the database.
    /// A concrete `String`: the generic version ran unspecialised across the module boundary, some 450
    /// instructions a character on every webhook (callgrind).
    public static func isWellFormed(_ text: String) -> Bool {
        text.utf8.count == length
            && text.utf8.allSatisfy { byte in
                (byte >= 0x41 && byte <= 0x5a) || (byte >= 0x61 && byte <= 0x7a) || (byte >= 0x30 && byte <= 0x39)
                    || byte == 0x2d || byte == 0x5f
            }
    }
}

/// Bearer tokens for the device API (SPEC §2.1): 32 random bytes, unpadded base64url (43 characters).
/// Only the SHA-256 of a token is stored; a presented token is hashed and compared in constant time.
public enum AuthToken {
    public static func generate() throws(Crypto.RandomnessUnavailable) -> String {
        Base64URL.encode(try Crypto.randomBytes(32))
    }

    /// The stored form: SHA-256 of the token's UTF-8 bytes as lower-case hex (as the Go relay stores it, so
    /// imported devices keep their logins).
    public static func hash(_ token: String) -> String { Crypto.sha256Hex(token) }

    /// Whether `token` hashes to `storedHash`, compared in constant time. An empty stored hash never matches.
    public static func matches(_ token: String, storedHash: String) -> Bool {
        let presented = Array(hash(token).utf8)
        let stored = Array(storedHash.utf8)
        return !stored.isEmpty && Crypto.constantTimeEqual(presented, stored)
    }
}

/// Device tokens as the iPhone app sends them: hex, 32 to 512 characters, even length. Stored lower-cased.
public enum DeviceToken {
    /// The canonical (lower-case) form, or nil when `text` is not a valid device token.
    public static func normalized(_ text: String) -> String? {
        let utf8 = text.utf8
        guard (32...512).contains(utf8.count), utf8.count % 2 == 0,
            utf8.allSatisfy({ ($0 >= 0x30 && $0 <= 0x39) || ($0 >= 0x61 && $0 <= 0x66) || ($0 >= 0x41 && $0 <= 0x46) })
        else { return nil }
        return text.lowercased()
    }
}

/// Unpadded base64url (RFC 4648 §5).
public enum Base64URL {
    private static let table = Array("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_".utf8)

    public static func encode(_ bytes: [UInt8]) -> String {
        var out = [UInt8]()
        out.reserveCapacity((bytes.count * 4 + 2) / 3)
        var index = 0
        while index + 3 <= bytes.count {
            let n = UInt32(bytes[index]) << 16 | UInt32(bytes[index + 1]) << 8 | UInt32(bytes[index + 2])
            out += [table[Int(n >> 18 & 63)], table[Int(n >> 12 & 63)], table[Int(n >> 6 & 63)], table[Int(n & 63)]]
            index += 3
        }
        let rest = bytes.count - index
        if rest == 1 {
            let n = UInt32(bytes[index]) << 16
            out += [table[Int(n >> 18 & 63)], table[Int(n >> 12 & 63)]]
        } else if rest == 2 {
            let n = UInt32(bytes[index]) << 16 | UInt32(bytes[index + 1]) << 8
            out += [table[Int(n >> 18 & 63)], table[Int(n >> 12 & 63)], table[Int(n >> 6 & 63)]]
        }
        return String(decoding: out, as: UTF8.self)
    }
}

/// Job ids: random (version 4) UUIDs in lower case, from OpenSSL's CSPRNG through `RandomReserve`. Foundation's
/// UUID() reads /dev/urandom with an open() per call, which showed up in ingest's profile.
public enum JobID {
    public static func generate() throws(Crypto.RandomnessUnavailable) -> String {
        var bytes = try RandomReserve.bytes(16)
        bytes[6] = bytes[6] & 0x0f | 0x40  // version 4
        bytes[8] = bytes[8] & 0x3f | 0x80  // RFC 4122 variant
        let digits: [UInt8] = Array("0123456789abcdef".utf8)
        var text = [UInt8]()
        text.reserveCapacity(36)
        for (index, byte) in bytes.enumerated() {
            if index == 4 || index == 6 || index == 8 || index == 10 { text.append(UInt8(ascii: "-")) }
            text.append(digits[Int(byte >> 4)])
            text.append(digits[Int(byte & 0x0f)])
        }
        return String(decoding: text, as: UTF8.self)
    }
}
