import Foundation

/// Paths of the committed test TLS material (scripts/generate-test-certs.sh).
public enum TLSFixtures {
    public static let directory = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
        .appendingPathComponent("Fixtures/tls")

    public static func path(_ name: String) -> String {
        return directory.appendingPathComponent(name).path
    }
    public static var caFile: String { path("ca.pem") }
    public static var signingKey: String { path("apns-key.p8") }
    public static var signingPublicKey: String { path("apns-key.pub.pem") }
}
