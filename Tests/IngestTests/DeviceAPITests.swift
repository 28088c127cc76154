import Common
import Foundation
import Ingest
import Queue
import TestSupport
import Testing

/// The device API as the iPhone app uses it (SPEC §2.1), against the real server.
@Suite struct DeviceAPITests {
    let h: IngestHarness
    init() throws { h = try IngestHarness() }

    func authorized(_ method: String, _ id: String, _ auth: String, body: String? = nil) throws -> RawHTTPClient.Response {
        var headers = [("Authorization", "Bearer \(auth)")]
        if body != nil { headers.append(("Content-Type", "application/json")) }
        return try h.client.send(method, "/devices/\(id)", headers: headers, body: Array((body ?? "").utf8))
    }

    @Test func registerCreatesThenRecognisesTheTokenAndRotatesTheAuthToken() throws {
        let upper = String(repeating: "AB", count: 32)
        let first = try h.client.send(
            "POST", "/devices", headers: [("Content-Type", "application/json")],
            body: Array("{\"device_token\":\"\(upper)\"}".utf8))
        #expect(first.status == 201)
        let device = try #require(first.json)
        #expect(device["device_token"] as? String == upper.lowercased())
        #expect(device["last_successful_notification"] as? String == "")
        #expect(device["down_notification_level"] as? String == "normal")
        #expect((device["date_added"] as? String).flatMap(RFC3339.parse) != nil)
        let id = try #require(device["id"] as? String)
        let oldAuth = try #require(device["auth_token"] as? String)
        #expect(DeviceID.isWellFormed(id) && oldAuth.count == 43)

        let second = try h.client.send(
            "POST", "/devices", headers: [("Content-Type", "application/json")],
            body: Array("{\"device_token\":\"\(upper.lowercased())\"}".utf8))
        #expect(second.status == 200)
        #expect(second.json?["id"] as? String == id)
        let newAuth = try #require(second.json?["auth_token"] as? String)
        #expect(newAuth != oldAuth)
        #expect(try authorized("GET", id, oldAuth).status == 401)
        #expect(try authorized("GET", id, newAuth).status == 200)
    }

    @Test(arguments: [
        ("not json", 400, "invalid request body"), ("[]", 400, "invalid request body"),
        ("{\"device_token\":12}", 400, "invalid request body"), ("{}", 400, "invalid request body"),
        ("{\"device_token\":\"xyz\"}", 400, "invalid device token"),
        ("{\"device_token\":\"abc\"}", 400, "invalid device token")
    ])
    func registerRejectsBadBodies(body: String, status: Int, message: String) throws {
        let response = try h.client.send("POST", "/devices", headers: [("Content-Type", "application/json")], body: Array(body.utf8))
        #expect(response.status == status && response.json?["error"] as? String == message)
    }

    @Test func getReturnsTheDeviceAndAnyAuthFailureLooksTheSame() throws {
        let (id, auth) = try h.register()
        let ok = try authorized("GET", id, auth)
        #expect(ok.status == 200 && ok.json?["id"] as? String == id && ok.json?["auth_token"] == nil)
        let lowerScheme = try h.client.send("GET", "/devices/\(id)", headers: [("Authorization", "bearer   \(auth)  ")])
        #expect(lowerScheme.status == 200)
        let failures = [
            try authorized("GET", id, auth + "x"),
            try h.client.send("GET", "/devices/\(id)"),
            try h.client.send("GET", "/devices/\(id)", headers: [("Authorization", "Basic \(auth)")]),
            try authorized("GET", "NoSuchDevice12", auth),
            try authorized("GET", "not-an-id", auth)
        ]
        for failure in failures {
            #expect(failure.status == 401 && failure.text == "{\"error\":\"unauthorized\"}")
        }
    }

    @Test func patchValidatesInOrderAndUpdates() throws {
        let (id, auth) = try h.register()
        let other = try h.register(token: String(repeating: "cd", count: 32))
        _ = other
        #expect(try authorized("PATCH", id, auth, body: "{}").json?["error"] as? String == "nothing to update")
        #expect(
            try authorized("PATCH", id, auth, body: "{\"device_token\":null,\"down_notification_level\":null}").json?["error"] as? String
                == "nothing to update")
        #expect(try authorized("PATCH", id, auth, body: "{\"device_token\":\"zz\"}").json?["error"] as? String == "invalid device token")
        #expect(
            try authorized("PATCH", id, auth, body: "{\"down_notification_level\":\"loud\"}").json?["error"] as? String
                == "invalid down_notification_level")
        #expect(try authorized("PATCH", id, auth, body: "{\"down_notification_level\":5}").json?["error"] as? String == "invalid request body")
        #expect(try authorized("PATCH", id, auth, body: "nope").status == 400)
        let conflict = try authorized("PATCH", id, auth, body: "{\"device_token\":\"\(String(repeating: "cd", count: 32))\"}")
        #expect(conflict.status == 409 && conflict.json?["error"] as? String == "device token already registered")
        let level = try authorized("PATCH", id, auth, body: "{\"down_notification_level\":\"time-sensitive\"}")
        #expect(level.status == 200 && level.json?["down_notification_level"] as? String == "time-sensitive")
        let newToken = String(repeating: "EF", count: 40)
        let token = try authorized("PATCH", id, auth, body: "{\"device_token\":\"\(newToken)\"}")
        #expect(token.status == 200 && token.json?["device_token"] as? String == newToken.lowercased())
        #expect(token.json?["id"] as? String == id, "the webhook URL survives a token change")
        #expect(try authorized("PATCH", id, "wrong", body: "{\"down_notification_level\":\"normal\"}").status == 401)
    }

    @Test func deleteAnswers204AndTheWebhookStopsAtOnce() throws {
        let (id, auth) = try h.register()
        #expect(try h.webhook(id, Fixtures.text("a-1.23-http-down.json")).status == 202)
        let deleted = try authorized("DELETE", id, auth)
        #expect(deleted.status == 204 && deleted.headers["content-type"] == "application/json" && deleted.body.isEmpty)
        #expect(try h.jobIDs().isEmpty, "the device's pending jobs are dropped")
        let after = try h.webhook(id, Fixtures.text("a-1.23-http-down.json"))
        #expect(after.status == 404 && after.json?["error"] as? String == "device not found")
        #expect(try authorized("GET", id, auth).status == 401)
    }
}

@Suite struct RegisterRateLimitTests {
    @Test func registrationsPerClientAreLimitedWithRetryAfter() throws {
        let h = try IngestHarness(["RATE_LIMIT_REGISTER": "2/1m"])
        _ = try h.register(token: String(repeating: "a1", count: 32))
        _ = try h.register(token: String(repeating: "a2", count: 32))
        let third = try h.client.send(
            "POST", "/devices", headers: [("Content-Type", "application/json")],
            body: Array("{\"device_token\":\"\(String(repeating: "a3", count: 32))\"}".utf8))
        #expect(third.status == 429 && third.json?["error"] as? String == "too many requests")
        #expect(Int(third.headers["retry-after"] ?? "") ?? 0 >= 1)
    }

    @Test func behindATrustedProxyEachForwardedClientHasItsOwnLimit() throws {
        let h = try IngestHarness(["RATE_LIMIT_REGISTER": "1/1m", "BEHIND_PROXY": "true"])
        func register(_ forwardedFor: String, _ seed: String) throws -> Int {
            try h.client.send(
                "POST", "/devices", headers: [("Content-Type", "application/json"), ("X-Forwarded-For", forwardedFor)],
                body: Array("{\"device_token\":\"\(String(repeating: seed, count: 32))\"}".utf8)
            ).status
        }
        #expect(try register("203.0.113.7", "b1") == 201)
        #expect(try register("203.0.113.8", "b2") == 201)
        #expect(try register("203.0.113.7", "b3") == 429)
        // A client cannot escape by prepending its own entries: the right-most untrusted address counts.
        #expect(try register("1.1.1.1, 203.0.113.8", "b4") == 429)
    }
}
