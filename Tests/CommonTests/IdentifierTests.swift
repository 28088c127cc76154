import Common
import Foundation
import Testing

@Suite struct IdentifierTests {
    @Test func deviceIDsHaveFourteenURLSafeCharacters() throws {
        for _ in 0..<200 {
            let id = try DeviceID.generate()
            #expect(id.count == 14)
            #expect(DeviceID.isWellFormed(id))
            #expect(id.allSatisfy { DeviceID.alphabet.contains($0) })
        }
    }

    /// 10,000 ids: no repeats, and every one of the 64 symbols used about equally often. With 140,000 draws each
    /// symbol is expected ~2,188 times (σ ≈ 46); the bounds are ±10σ, so a fair generator never fails this, while
    /// a broken mapping (a symbol never drawn, or a modulo bias of a non-power-of-two alphabet) does.
    @Test func deviceIDsAreUniqueAndUniformlyDistributed() throws {
        var seen = Set<String>()
        var counts: [Character: Int] = [:]
        for _ in 0..<10_000 {
            let id = try DeviceID.generate()
            seen.insert(id)
            for character in id { counts[character, default: 0] += 1 }
        }
        #expect(seen.count == 10_000)
        #expect(counts.count == 64)
        let expected = 140_000.0 / 64
        for (character, count) in counts {
            #expect(abs(Double(count) - expected) < 460, "symbol \(character) drawn \(count) times")
        }
    }

    @Test func wellFormedDeviceIDsRejectOtherText() {
        for bad in ["", "short", "V1StGXR8_Z5jdH1", "V1StGXR8_Z5jd!", "V1StGXR8 Z5jdH", "ÄbcdefghijklmN"] {
            #expect(!DeviceID.isWellFormed(bad), "\(bad)")
        }
        #expect(DeviceID.isWellFormed("V1StGXR8_Z5jdH"))
    }

    @Test func authTokensAre43CharactersOfUnpaddedBase64URL() throws {
        var seen = Set<String>()
        for _ in 0..<500 {
            let token = try AuthToken.generate()
            #expect(token.count == 43)
            #expect(token.allSatisfy { $0.isASCII && ($0.isLetter || $0.isNumber || $0 == "-" || $0 == "_") })
            seen.insert(token)
        }
        #expect(seen.count == 500)
    }

    @Test func authTokenHashIsLowercaseHexSHA256AndMatchesOnlyItsToken() throws {
        // SHA-256("abc") from FIPS 180-2, appendix B.1.
        #expect(AuthToken.hash("abc") == "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad")
        let token = try AuthToken.generate()
        let stored = AuthToken.hash(token)
        #expect(AuthToken.matches(token, storedHash: stored))
        #expect(!AuthToken.matches(token + "x", storedHash: stored))
        #expect(!AuthToken.matches("", storedHash: ""))
        #expect(!AuthToken.matches(token, storedHash: ""))
    }

    @Test func constantTimeEqualComparesWholeValues() {
        #expect(Crypto.constantTimeEqual([1, 2, 3], [1, 2, 3]))
        #expect(!Crypto.constantTimeEqual([1, 2, 3], [1, 2, 4]))
        #expect(!Crypto.constantTimeEqual([1, 2, 3], [1, 2]))
        #expect(Crypto.constantTimeEqual([], []))
    }

    @Test func base64URLMatchesRFC4648Vectors() {
        let vectors: [(String, String)] = [
            ("", ""), ("f", "Zg"), ("fo", "Zm8"), ("foo", "Zm9v"), ("foob", "Zm9vYg"),
            ("fooba", "Zm9vYmE"), ("foobar", "Zm9vYmFy")
        ]
        for (input, output) in vectors { #expect(Base64URL.encode(Array(input.utf8)) == output) }
        #expect(Base64URL.encode([0xfb, 0xff]) == "-_8")
    }

    @Test func deviceTokensAreValidatedAndLowerCased() {
        let upper = String(repeating: "AB", count: 32)
        #expect(DeviceToken.normalized(upper) == String(repeating: "ab", count: 32))
        #expect(DeviceToken.normalized(String(repeating: "a", count: 32)) != nil)
        #expect(DeviceToken.normalized(String(repeating: "a", count: 512)) != nil)
        for bad in [
            String(repeating: "a", count: 30), String(repeating: "a", count: 33), String(repeating: "a", count: 514),
            String(repeating: "g", count: 32), String(repeating: "a", count: 31) + " ", ""
        ] {
            #expect(DeviceToken.normalized(bad) == nil)
        }
    }
}

@Suite struct ProviderTokenTests {
    static let fixtures = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
        .appendingPathComponent("Fixtures/tls")

    @Test func aProviderTokenVerifiesWithThePublicKeyAndCarriesItsClaims() throws {
        let privateKey = try ES256.PrivateKey(pem: Array(try Data(contentsOf: Self.fixtures.appendingPathComponent("apns-key.p8"))))
        let publicKey = try ES256.PublicKey(pem: Array(try Data(contentsOf: Self.fixtures.appendingPathComponent("apns-key.pub.pem"))))
        let token = try JSONWebToken.providerToken(keyID: "ABC123DEFG", teamID: "DEF123GHIJ", issuedAt: 1_789_905_600, key: privateKey)
        let parts = token.split(separator: ".")
        #expect(parts.count == 3 && Base64URL.decode(String(parts[2]))?.count == 64)
        let claims = try #require(JSONWebToken.verifyProviderToken(token, key: publicKey))
        #expect(claims.keyID == "ABC123DEFG" && claims.teamID == "DEF123GHIJ" && claims.issuedAt == 1_789_905_600)
        // Any change to the signed part breaks the signature.
        let forged = token.replacingOccurrences(of: String(parts[1]), with: Base64URL.encode(Array("{\"iss\":\"EVIL\",\"iat\":1}".utf8)))
        #expect(JSONWebToken.verifyProviderToken(forged, key: publicKey) == nil)
    }

    @Test func keysThatAreNotP256PEMAreRejected() {
        #expect(throws: ES256.KeyError.self) { _ = try ES256.PrivateKey(pem: Array("not a key".utf8)) }
        #expect(throws: ES256.KeyError.self) { _ = try ES256.PublicKey(pem: []) }
    }
}

@Suite struct JobIDTests {
    @Test func jobIDsAreVersion4UUIDsInLowerCase() throws {
        var seen = Set<String>()
        for _ in 0..<1000 {
            let id = try JobID.generate()
            let uuid = try #require(UUID(uuidString: id))
            #expect(id == uuid.uuidString.lowercased())
            #expect(Array(id)[14] == "4" && "89ab".contains(Array(id)[19]))
            seen.insert(id)
        }
        #expect(seen.count == 1000)
    }
}

@Suite struct RandomReserveTests {
    /// Four threads drawing through several refills never get the same bytes: the reserve hands each byte out once.
    @Test func threadsDrawingThroughRefillsNeverShareBytes() async {
        let perThread = 3 * RandomReserve.refillSize / 16
        let draws = await withTaskGroup(of: [[UInt8]].self) { group in
            for _ in 0..<4 {
                group.addTask { (0..<perThread).map { _ in (try? RandomReserve.bytes(16)) ?? [] } }
            }
            return await group.reduce(into: []) { $0 += $1 }
        }
        #expect(draws.count == 4 * perThread && draws.allSatisfy { $0.count == 16 })
        #expect(Set(draws).count == draws.count)
    }
}
