import Foundation

/// APNs provider tokens (ES256 JWTs): header `{"alg":"ES256","kid":KEY_ID}`, claims `{"iss":TEAM_ID,"iat":seconds}`.
public enum JSONWebToken {
    /// A signed token for `keyID`/`teamID` issued at `issuedAt` (seconds since 1970).
    public static func providerToken(keyID: String, teamID: String, issuedAt: Int64, key: ES256.PrivateKey) throws(ES256.KeyError) -> String {
        let header = Base64URL.encode(Array("{\"alg\":\"ES256\",\"kid\":\(JSONText.quoted(keyID))}".utf8))
        let claims = Base64URL.encode(Array("{\"iss\":\(JSONText.quoted(teamID)),\"iat\":\(issuedAt)}".utf8))
        let signingInput = header + "." + claims
        let signature = try key.sign(Array(signingInput.utf8))
        return signingInput + "." + Base64URL.encode(signature)
    }

    /// The parts of a verified provider token, or nil when it is malformed or the signature does not verify.
    public static func verifyProviderToken(_ token: String, key: ES256.PublicKey) -> (keyID: String, teamID: String, issuedAt: Int64)? {
        let parts = token.split(separator: ".", omittingEmptySubsequences: false)
        guard parts.count == 3, let headerBytes = Base64URL.decode(String(parts[0])), let claimBytes = Base64URL.decode(String(parts[1])),
            let signature = Base64URL.decode(String(parts[2])),
            key.verify(signature, of: Array("\(parts[0]).\(parts[1])".utf8)),
            let header = try? JSONParser.parse(headerBytes), let claims = try? JSONParser.parse(claimBytes),
            header["alg"]?.stringValue == "ES256", let keyID = header["kid"]?.stringValue,
            let teamID = claims["iss"]?.stringValue, let issuedAt = claims["iat"]?.intValue.map(Int64.init)
        else { return nil }
        return (keyID, teamID, issuedAt)
    }
}

extension Base64URL {
    /// Decodes unpadded (or padded) base64url; nil for invalid text.
    public static func decode(_ text: String) -> [UInt8]? {
        var standard = text.replacingOccurrences(of: "-", with: "+").replacingOccurrences(of: "_", with: "/")
        while standard.count % 4 != 0 { standard += "=" }
        return Data(base64Encoded: standard).map(Array.init)
    }
}
