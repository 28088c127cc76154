import Common

/// Every parser that sees outside bytes, behind one function per input kind, for the libFuzzer targets
/// (`make fuzz`) and the corpus replay in `make test`. Each must return for any input: no crash, no hang.
public enum FuzzEntryPoints {
    public static let names = ["json", "tolerant-json", "form", "webhook", "query", "authorization", "apns-response"]

    public static func run(_ name: String, _ bytes: [UInt8]) {
        switch name {
        case "json":
            _ = try? JSONParser.parse(bytes)
            _ = try? JSONParser.parse(bytes, keeping: WebhookParser.keysRead)
        case "tolerant-json":
            // The custom-text path alone: tolerant JSON, the form recogniser, and the whole strict/tolerant/text chain.
            _ = TolerantJSONParser.parse(bytes)
            if let text = String(validating: bytes, as: UTF8.self) {
                _ = FormText.fields(text)
                _ = CustomText.event(text, unwrapped: false)
            }
        case "form":
            // The form reader (issue 36: it was quadratic), then the whole body path for both types that reach it.
            if let text = String(validating: bytes, as: UTF8.self) { _ = FormText.fields(text) }
            for type in ["application/x-www-form-urlencoded", "text/plain"] {
                _ = WebhookParser.parse(HTTPRequest(method: "POST", path: "/wh/x", headers: ["content-type": type], body: bytes))
            }
        case "webhook":
            // The first byte picks the content type; the rest is the body (and, for GET, the query).
            let types = ["application/json", "application/x-www-form-urlencoded", "multipart/form-data; boundary=x", "text/plain"]
            let type = types[Int(bytes.first ?? 0) % types.count]
            let body = Array(bytes.dropFirst())
            _ = WebhookParser.parse(
                HTTPRequest(
                    method: "POST", path: "/wh/x", headers: ["content-type": type], body: body,
                    formFields: [("data", body)]))
            _ = WebhookParser.parse(HTTPRequest(method: "GET", path: "/wh/x", rawQuery: String(decoding: body, as: UTF8.self)))
        case "query":
            _ = QueryString.parse(String(decoding: bytes, as: UTF8.self))
        case "authorization":
            _ = DeviceAPI.bearerToken(String(decoding: bytes, as: UTF8.self))
        case "apns-response":
            _ = APNsErrorBody.reason(bytes)
        default:
            preconditionFailure("unknown fuzz target \(name)")
        }
    }
}
