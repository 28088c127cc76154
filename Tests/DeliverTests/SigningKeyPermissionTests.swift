import Common
import Deliver
import Foundation
import TestSupport
import Testing

/// The signing key is the one secret that can push to every user: a key file others can read is reported at
/// start-up — judged by the file itself, also when APNS_AUTH_KEY_PATH names a symbolic link to it (the link's own
/// mode is always 777 and says nothing).
@Suite struct SigningKeyPermissionTests {
    /// Loads the fixture key copied to `mode`, through a symbolic link when `throughLink`; the warnings logged.
    private func warnings(keyMode mode: Int, throughLink: Bool) throws -> [String] {
        let directory = TemporaryDirectory()
        let key = directory.path("AuthKey.p8")
        try FileManager.default.copyItem(atPath: TLSFixtures.signingKey, toPath: key)
        try FileManager.default.setAttributes([.posixPermissions: mode], ofItemAtPath: key)
        var path = key
        if throughLink {
            path = directory.path("current.p8")
            try FileManager.default.createSymbolicLink(atPath: path, withDestinationPath: key)
        }
        var settings = Settings()
        settings.apnsAuthKeyPath = path
        settings.apnsKeyID = "KEY1234567"
        settings.apnsTeamID = "TEAM123456"
        settings.appBundleIdentifier = "com.example.kumapush"
        let lines = LogCapture()
        let logger = Logger(label: "relay", level: .info, sink: LogSink(format: .text) { line in lines.append(line) })
        _ = try ProviderTokenSource.load(settings: settings, clock: SystemClock(), logger: logger)
        return lines.all.filter { $0.contains("world-readable") }
    }

    @Test(arguments: [false, true]) func aKeyOnlyItsOwnerReadsIsLoadedQuietly(_ throughLink: Bool) throws {
        #expect(try warnings(keyMode: 0o600, throughLink: throughLink).isEmpty)
    }

    @Test(arguments: [false, true]) func aKeyOthersCanReadIsReported(_ throughLink: Bool) throws {
        let logged = try warnings(keyMode: 0o644, throughLink: throughLink)
        #expect(logged.count == 1)
        #expect(logged.first?.contains("mode=644") == true)
    }
}
