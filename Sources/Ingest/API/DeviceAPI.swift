import Common
import Queue

/// `/devices` and `/devices/:id` (SPEC §2.1). Runs off the MHD threads (it touches the disk), one request per call.
struct DeviceAPI: Sendable {
    let store: any DeviceStore
    let clock: any WallClock
    let registerLimiter: SlidingWindowLimiter
    let logger: Logger

    /// A hash no token produces, compared against when the device does not exist, so a missing device and a wrong
    /// token take the same time (SPEC §2.1).
    private static let decoyHash = String(repeating: "0", count: 64)

    func register(_ request: HTTPRequest, client: String) -> HTTPResponse {
        if case .limited(let seconds) = registerLimiter.hit(client, now: clock.nowMillis()) {
            return .error(429, "too many requests", headers: [("Retry-After", String(seconds))])
        }
        guard let object = Self.jsonObject(request), let raw = object["device_token"]?.stringValue else {
            return .error(400, "invalid request body")
        }
        guard let token = DeviceToken.normalized(raw) else { return .error(400, "invalid device token") }
        do {
            let authToken = try AuthToken.generate()
            let registration = try store.registerDevice(
                token: token, authTokenHash: AuthToken.hash(authToken),
                now: clock.nowMillis(), newID: { try DeviceID.generate() })
            logger.info(registration.created ? "device registered" : "device re-registered", ["device.token": Redact.token(token)])
            return .json(registration.created ? 201 : 200, DeviceJSON.render(registration.device, authToken: authToken))
        } catch let error as StoreError where error.code == .unavailable {
            return failure(error)
        } catch {
            logger.error("register failed", ["error": "\(error)"])
            return .error(500, "unable to register device")
        }
    }

    func get(_ request: HTTPRequest, id: String) -> HTTPResponse {
        authenticated(request, id: id) { device in .json(200, DeviceJSON.render(device)) }
    }

    func update(_ request: HTTPRequest, id: String) -> HTTPResponse {
        authenticated(request, id: id) { _ in
            guard let object = Self.jsonObject(request) else { return .error(400, "invalid request body") }
            // A JSON null counts as absent (the app's optional fields).
            let rawToken = object["device_token"].flatMap { $0.isNull ? nil : $0 }
            let rawLevel = object["down_notification_level"].flatMap { $0.isNull ? nil : $0 }
            guard rawToken == nil || rawToken?.stringValue != nil, rawLevel == nil || rawLevel?.stringValue != nil else {
                return .error(400, "invalid request body")
            }
            guard rawToken != nil || rawLevel != nil else { return .error(400, "nothing to update") }
            var token: String?
            if let raw = rawToken?.stringValue {
                guard let normalized = DeviceToken.normalized(raw) else { return .error(400, "invalid device token") }
                token = normalized
            }
            var level: Device.DownNotificationLevel?
            if let raw = rawLevel?.stringValue {
                guard let parsed = Device.DownNotificationLevel(rawValue: raw) else {
                    return .error(400, "invalid down_notification_level")
                }
                level = parsed
            }
            do throws(StoreError) {
                guard let updated = try store.updateDevice(id: id, token: token, level: level) else {
                    return .error(404, "device not found")
                }
                return .json(200, DeviceJSON.render(updated))
            } catch  where error.code == .tokenConflict {
                return .error(409, "device token already registered")
            } catch {
                return failure(error)
            }
        }
    }

    func delete(_ request: HTTPRequest, id: String) -> HTTPResponse {
        authenticated(request, id: id) { _ in
            do throws(StoreError) {
                return try store.deleteDevice(id: id, now: clock.nowMillis()) ? HTTPResponse(status: 204) : .error(404, "device not found")
            } catch {
                return failure(error)
            }
        }
    }

    /// Runs `body` when the bearer token belongs to device `id`; otherwise 401, the same for every reason.
    private func authenticated(_ request: HTTPRequest, id: String, _ body: (Device) -> HTTPResponse) -> HTTPResponse {
        let presented = Self.bearerToken(request.header("authorization"))
        let device: Device?
        do {
            device = DeviceID.isWellFormed(id) ? try store.device(id: id) : nil
        } catch {
            return failure(error)
        }
        let storedHash = device?.authTokenHash ?? Self.decoyHash
        let matches = AuthToken.matches(presented ?? "", storedHash: storedHash)
        guard let device, presented != nil, matches else { return .error(401, "unauthorized") }
        return body(device)
    }

    /// The token of `Authorization: Bearer <token>` (scheme case-insensitive, surrounding spaces trimmed).
    public static func bearerToken(_ header: String?) -> String? {
        guard let header, header.utf8.count > 7, header.prefix(7).lowercased() == "bearer " else { return nil }
        let token = header.dropFirst(7).trimmingWhitespace()
        return token.isEmpty ? nil : token
    }

    static func jsonObject(_ request: HTTPRequest) -> JSONValue? {
        guard request.mediaType == "application/json" || request.mediaType == nil,
            let value = try? JSONParser.parse(request.body), value.isObject
        else { return nil }
        return value
    }

    private func failure(_ error: StoreError) -> HTTPResponse {
        logger.error("device request failed", ["error": error.description])
        return error.code == .unavailable
            ? .error(503, "database unavailable", headers: [("Retry-After", "5")])
            : .error(500, "unable to process device request")
    }
}
