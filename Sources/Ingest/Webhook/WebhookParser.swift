import Common

/// Reads an alert out of every body Uptime Kuma can send (SPEC §2.2, reference/uptime-kuma-webhook.md):
/// JSON; multipart/form-data with the JSON in its `data` part; custom bodies under
/// application/x-www-form-urlencoded (raw JSON text, a `data` field, or axios' bracket notation); JSON that is a
/// string holding JSON (Uptime Kuma #7211); and GET query parameters. Any other JSON object with a string `title`
/// and/or `body` is a generic notification.
public enum WebhookParser {
    public enum Rejection: Error, Equatable {
        /// 400 `invalid request body`.
        case invalidBody
        /// 415: the content type is neither JSON nor a form.
        case unsupportedMediaType
    }

    public static func parse(_ request: HTTPRequest) -> Result<AlertEvent, Rejection> {
        if request.method == "GET" { return fromQuery(request.rawQuery) }
        switch request.mediaType {
        case "application/json", "text/json":
            return fromJSONText(request.body)
        case let type? where type.hasPrefix("application/") && type.hasSuffix("+json"):
            return fromJSONText(request.body)
        case "multipart/form-data":
            guard let data = request.formFields.first(where: { $0.name == "data" }) else { return .failure(.invalidBody) }
            return fromJSONText(data.value)
        case "application/x-www-form-urlencoded":
            return fromURLEncoded(request)
        default:
            return .failure(.unsupportedMediaType)
        }
    }

    /// Uptime Kuma's default for custom bodies is urlencoded whatever the text is: a body that looks like JSON is
    /// JSON; otherwise it is a form (`data=<json>`, or the fields themselves).
    static func fromURLEncoded(_ request: HTTPRequest) -> Result<AlertEvent, Rejection> {
        if let first = request.body.first(where: { !$0.isJSONWhitespace }), first == UInt8(ascii: "{") || first == UInt8(ascii: "\"") {
            return fromJSONText(request.body)
        }
        var fields: [String: String] = [:]
        for field in request.formFields {
            guard let value = String(validating: field.value, as: UTF8.self) else { return .failure(.invalidBody) }
            fields[field.name] = value
        }
        if let data = fields["data"] { return fromJSONText(Array(data.utf8)) }
        return fromFlatFields(fields)
    }

    /// GET mode (Uptime Kuma 2.1+): `msg`, and `heartbeat`/`monitor` as JSON texts; `+` is a space.
    static func fromQuery(_ query: String) -> Result<AlertEvent, Rejection> {
        guard let parameters = QueryString.parse(query) else { return .failure(.invalidBody) }
        var members: [(key: String, value: JSONValue)] = []
        for key in ["heartbeat", "monitor"] {
            guard let text = parameters[key] else { continue }
            guard let value = try? JSONParser.parse(Array(text.utf8)) else { return .failure(.invalidBody) }
            members.append((key, value))
        }
        for key in ["msg", "title", "body"] {
            if let text = parameters[key] { members.append((key, .string(text))) }
        }
        return fromObject(.object(members))
    }

    /// The only keys the relay reads, at any depth; everything else is validated and dropped while parsing.
    static let keysRead: Set<String> = ["heartbeat", "monitor", "msg", "title", "body", "status", "important", "monitorID", "name", "id"]

    static func fromJSONText(_ bytes: [UInt8]) -> Result<AlertEvent, Rejection> {
        guard let value = try? JSONParser.parse(bytes, keeping: keysRead) else { return .failure(.invalidBody) }
        if value.isObject { return fromObject(value) }
        // Double encoding (#7211): a JSON string whose text is the JSON object.
        if let text = value.stringValue, let inner = try? JSONParser.parse(Array(text.utf8), keeping: keysRead), inner.isObject {
            return fromObject(inner)
        }
        return .failure(.invalidBody)
    }

    /// Recognises Uptime Kuma's shape first, then a generic `{title, body}`.
    static func fromObject(_ object: JSONValue) -> Result<AlertEvent, Rejection> {
        if object["heartbeat"] != nil || object["monitor"] != nil || object["msg"] != nil {
            return uptimeKuma(object).map(Result.success) ?? .failure(.invalidBody)
        }
        let title = object["title"]
        let body = object["body"]
        guard title != nil || body != nil,
              title == nil || title?.stringValue != nil, body == nil || body?.stringValue != nil
        else { return .failure(.invalidBody) }
        return .success(AlertEvent(kind: .generic, title: title?.stringValue ?? "", message: body?.stringValue ?? ""))
    }

    /// `{heartbeat, monitor, msg}`; nil when a field has the wrong type. Absent and null are the same to
    /// Uptime Kuma, so they are here.
    static func uptimeKuma(_ object: JSONValue) -> AlertEvent? {
        guard let heartbeat = optional(object["heartbeat"], \.isObject), let monitor = optional(object["monitor"], \.isObject),
              let message = optionalString(object["msg"])
        else { return nil }
        guard let heartbeat = heartbeat.value, let monitor = monitor.value else {
            return .test(message.value ?? "")
        }
        guard let status = optionalInt(heartbeat["status"]), let beatMessage = optionalString(heartbeat["msg"]),
              let important = optional(heartbeat["important"], { $0.boolValue != nil }),
              let name = optionalString(monitor["name"]), let id = optionalInt(monitor["id"] ?? heartbeat["monitorID"])
        else { return nil }
        return AlertEvent(kind: .monitor, status: AlertEvent.Status(rawValue: status.value ?? 0),
                          important: important.value?.boolValue ?? true, monitorID: id.value, monitorName: name.value ?? "",
                          message: beatMessage.value ?? "")
    }

    /// Bracket-notation forms (`heartbeat[status]=0&monitor[name]=DB&msg=…`), which Uptime Kuma's JSON mode produces
    /// when a user overrides the Content-Type to urlencoded; and flat `title`/`body`/`msg` fields.
    static func fromFlatFields(_ fields: [String: String]) -> Result<AlertEvent, Rejection> {
        var heartbeat: [(key: String, value: JSONValue)] = []
        var monitor: [(key: String, value: JSONValue)] = []
        var members: [(key: String, value: JSONValue)] = []
        for (key, value) in fields.sorted(by: { $0.key < $1.key }) {
            if key.hasPrefix("heartbeat["), key.hasSuffix("]") {
                heartbeat.append((String(key.dropFirst(10).dropLast()), formValue(value)))
            } else if key.hasPrefix("monitor["), key.hasSuffix("]") {
                monitor.append((String(key.dropFirst(8).dropLast()), formValue(value)))
            } else if ["msg", "title", "body"].contains(key) {
                members.append((key, .string(value)))
            }
        }
        if !heartbeat.isEmpty { members.append(("heartbeat", .object(heartbeat))) }
        if !monitor.isEmpty { members.append(("monitor", .object(monitor))) }
        guard !members.isEmpty else { return .failure(.invalidBody) }
        return fromObject(.object(members))
    }

    /// A form value as the JSON value it stood for: numbers and booleans lose their type in a form.
    static func formValue(_ text: String) -> JSONValue {
        if Int(text) != nil { return .number(text) }
        if text == "true" || text == "false" { return .bool(text == "true") }
        return .string(text)
    }

    // MARK: - Typed access. Each returns nil for a wrong type and a wrapped nil for absent or null.

    struct Field<T> { let value: T? }

    static func optional(_ value: JSONValue?, _ isExpected: (JSONValue) -> Bool) -> Field<JSONValue>? {
        guard let value, !value.isNull else { return Field(value: nil) }
        return isExpected(value) ? Field(value: value) : nil
    }

    static func optionalString(_ value: JSONValue?) -> Field<String>? {
        guard let value, !value.isNull else { return Field(value: nil) }
        return value.stringValue.map { Field(value: $0) }
    }

    static func optionalInt(_ value: JSONValue?) -> Field<Int>? {
        guard let value, !value.isNull else { return Field(value: nil) }
        return value.intValue.map { Field(value: $0) }
    }
}

extension UInt8 {
    var isJSONWhitespace: Bool { self == 0x20 || self == 0x09 || self == 0x0a || self == 0x0d }
}
