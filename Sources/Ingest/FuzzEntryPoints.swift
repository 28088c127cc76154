import Common

/// Every parser that sees outside bytes, behind one function per input kind, for the libFuzzer targets
/// (`make fuzz`) and the corpus replay in `make test`. Each must return for any input: no crash, no hang, and (the
/// webhook paths) no more work than `requireLinear` allows.
public enum FuzzEntryPoints {
    /// Issue 36: every parser of outside bytes is linear. A webhook parse that visits more bytes than
    /// `stepsPerByte` per byte plus `stepsForSearches` stops the process, so libFuzzer keeps the input as a finding
    /// on any machine, however fast. What the parsers can cost: the form reader, strict JSON and UTF-8 checks a few
    /// visits per byte each, and custom text at most two levels deep, each a tolerant search of at most 256 KiB plus
    /// one parse of the text, a parse visiting each byte at most about eight times (its look-ahead after quotes
    /// included): under 40 per byte and 4 MiB. A reader that looks back per field passes the bound within a few
    /// dozen KiB (issue 36's wide-field form: 30 million steps at 64 KiB against 12.4 million).
    static let stepsPerByte = 64
    static let stepsForSearches = 8 << 20

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
                var steps = 0
                _ = CustomText.event(text, unwrapped: false, steps: &steps)
                requireLinear(steps, for: bytes.count)
            }
        case "form":
            // The form reader (issue 36: it was quadratic), then the whole body path for both types that reach it.
            if let text = String(validating: bytes, as: UTF8.self) { _ = FormText.fields(text) }
            for type in ["application/x-www-form-urlencoded", "text/plain"] {
                parseWithinBound(HTTPRequest(method: "POST", path: "/wh/x", headers: ["content-type": type], body: bytes))
            }
        case "webhook":
            // The first byte picks the content type; the rest is the body (and, for GET, the query).
            let types = ["application/json", "application/x-www-form-urlencoded", "multipart/form-data; boundary=x", "text/plain"]
            let type = types[Int(bytes.first ?? 0) % types.count]
            let body = Array(bytes.dropFirst())
            parseWithinBound(
                HTTPRequest(
                    method: "POST", path: "/wh/x", headers: ["content-type": type], body: body,
                    formFields: [("data", body)]))
            parseWithinBound(HTTPRequest(method: "GET", path: "/wh/x", rawQuery: String(decoding: body, as: UTF8.self)))
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

    /// `WebhookParser.parse`, stopping the process when it visits more than `maximumStepsPerByte` per byte read.
    static func parseWithinBound(_ request: HTTPRequest) {
        var steps = 0
        _ = WebhookParser.parse(request, steps: &steps)
        requireLinear(steps, for: max(request.body.count, request.rawQuery.utf8.count))
    }

    static func requireLinear(_ steps: Int, for size: Int) {
        precondition(steps <= stepsPerByte * size + stepsForSearches, "\(steps) steps for \(size) bytes: a parser is not linear")
    }
}
