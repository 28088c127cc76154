import Common
import Foundation

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
            guard let value = String(validatingUTF8Bytes: field.value) else { return .failure(.invalidBody) }
            fields[field.name] = value
        }
        if let data = fields["data"] { return fromJSONText(Array(data.utf8)) }
        return fromFlatFields(fields)
    }

    /// GET mode (Uptime Kuma 2.1+): `msg`, and `heartbeat`/`monitor` as JSON texts; `+` is a space.
    static func fromQuery(_ query: String) -> Result<AlertEvent, Rejection> {
        guard let parameters = QueryString.parse(query) else { return .failure(.invalidBody) }
        var object: [String: Any] = [:]
        for key in ["heartbeat", "monitor"] {
            guard let text = parameters[key] else { continue }
            guard let value = try? JSONSerialization.jsonObject(with: Data(text.utf8), options: [.fragmentsAllowed]) else {
                return .failure(.invalidBody)
            }
            object[key] = value
        }
        if let message = parameters["msg"] { object["msg"] = message }
        for key in ["title", "body"] where parameters[key] != nil { object[key] = parameters[key] }
        return fromObject(object)
    }

    static func fromJSONText(_ bytes: [UInt8]) -> Result<AlertEvent, Rejection> {
        guard let value = try? JSONSerialization.jsonObject(with: Data(bytes), options: [.fragmentsAllowed]) else {
            return .failure(.invalidBody)
        }
        if let object = value as? [String: Any] { return fromObject(object) }
        // Double encoding (#7211): a JSON string whose text is the JSON object.
        if let text = value as? String,
           let inner = try? JSONSerialization.jsonObject(with: Data(text.utf8)) as? [String: Any] {
            return fromObject(inner)
        }
        return .failure(.invalidBody)
    }

    /// Recognises Uptime Kuma's shape first, then a generic `{title, body}`.
    static func fromObject(_ object: [String: Any]) -> Result<AlertEvent, Rejection> {
        if object.keys.contains(where: { $0 == "heartbeat" || $0 == "monitor" || $0 == "msg" }) {
            return uptimeKuma(object).map(Result.success) ?? .failure(.invalidBody)
        }
        let title = object["title"]
        let body = object["body"]
        guard title != nil || body != nil,
              title == nil || title is String, body == nil || body is String,
              !(isNumber(title) || isNumber(body))
        else { return .failure(.invalidBody) }
        return .success(AlertEvent(kind: .generic, title: title as? String ?? "", message: body as? String ?? ""))
    }

    /// `{heartbeat, monitor, msg}`; nil when a field has the wrong type.
    static func uptimeKuma(_ object: [String: Any]) -> AlertEvent? {
        guard let heartbeat = optionalObject(object["heartbeat"]), let monitor = optionalObject(object["monitor"]),
              let message = optionalString(object["msg"])
        else { return nil }
        guard let heartbeat = heartbeat.value, let monitor = monitor.value else {
            return .test(message.value ?? "")
        }
        guard let status = optionalInt(heartbeat["status"]), let beatMessage = optionalString(heartbeat["msg"]),
              let important = optionalBool(heartbeat["important"]),
              let name = optionalString(monitor["name"]), let id = optionalInt(monitor["id"] ?? heartbeat["monitorID"])
        else { return nil }
        return AlertEvent(kind: .monitor, status: AlertEvent.Status(rawValue: status.value ?? 0),
                          important: important.value ?? true, monitorID: id.value, monitorName: name.value ?? "",
                          message: beatMessage.value ?? "")
    }

    /// Bracket-notation forms (`heartbeat[status]=0&monitor[name]=DB&msg=…`), which Uptime Kuma's JSON mode produces
    /// when a user overrides the Content-Type to urlencoded; and flat `title`/`body`/`msg` fields.
    static func fromFlatFields(_ fields: [String: String]) -> Result<AlertEvent, Rejection> {
        var heartbeat: [String: Any] = [:]
        var monitor: [String: Any] = [:]
        var object: [String: Any] = [:]
        for (key, value) in fields {
            if key.hasPrefix("heartbeat["), key.hasSuffix("]") {
                heartbeat[String(key.dropFirst(10).dropLast())] = formValue(value)
            } else if key.hasPrefix("monitor["), key.hasSuffix("]") {
                monitor[String(key.dropFirst(8).dropLast())] = formValue(value)
            } else if ["msg", "title", "body"].contains(key) {
                object[key] = value
            }
        }
        if !heartbeat.isEmpty { object["heartbeat"] = heartbeat }
        if !monitor.isEmpty { object["monitor"] = monitor }
        guard !object.isEmpty else { return .failure(.invalidBody) }
        return fromObject(object)
    }

    /// A form value as the JSON value it stood for: numbers and booleans lose their type in a form.
    static func formValue(_ text: String) -> Any {
        if let number = Int(text) { return NSNumber(value: number) }
        if text == "true" || text == "false" { return NSNumber(value: text == "true") }
        return text
    }

    // MARK: - Typed access to JSONSerialization's output. Each returns nil for a wrong type and a wrapped nil for
    // absent or null, which Uptime Kuma uses interchangeably.

    struct Field<T> { let value: T? }

    static func optionalObject(_ value: Any?) -> Field<[String: Any]>? {
        guard let value, !(value is NSNull) else { return Field(value: nil) }
        return (value as? [String: Any]).map { Field(value: $0) }
    }

    static func optionalString(_ value: Any?) -> Field<String>? {
        guard let value, !(value is NSNull) else { return Field(value: nil) }
        guard !isNumber(value), let text = value as? String else { return nil }
        return Field(value: text)
    }

    static func optionalInt(_ value: Any?) -> Field<Int>? {
        guard let value, !(value is NSNull) else { return Field(value: nil) }
        guard let number = value as? NSNumber, !isBoolean(number), number.doubleValue == number.doubleValue.rounded() else { return nil }
        return Field(value: number.intValue)
    }

    static func optionalBool(_ value: Any?) -> Field<Bool>? {
        guard let value, !(value is NSNull) else { return Field(value: nil) }
        guard let number = value as? NSNumber, isBoolean(number) else { return nil }
        return Field(value: number.boolValue)
    }

    /// Foundation bridges JSON numbers and booleans both to NSNumber, and `as? Int` succeeds on `true`.
    /// JSONSerialization makes booleans with the `c` (char) type code and numbers with others.
    static func isBoolean(_ number: NSNumber) -> Bool { String(cString: number.objCType) == "c" }

    static func isNumber(_ value: Any?) -> Bool { value is NSNumber }
}

extension UInt8 {
    var isJSONWhitespace: Bool { self == 0x20 || self == 0x09 || self == 0x0a || self == 0x0d }
}

extension String {
    /// The text of `bytes` when they are valid UTF-8, else nil (never replacement characters).
    init?(validatingUTF8Bytes bytes: [UInt8]) {
        guard let text = String(bytes: bytes, encoding: .utf8) else { return nil }
        self = text
    }
}
