import Common

/// Reads an alert out of every body Uptime Kuma can send (SPEC §2.2, reference/uptime-kuma-webhook.md):
/// JSON; multipart/form-data with the JSON in its `data` part; GET query parameters; and custom bodies as users
/// really write them — unescaped templates under application/x-www-form-urlencoded or text/plain, or
/// JSON-stringified into a JSON string under application/json (Uptime Kuma #7211). Custom text goes through
/// `CustomText`: strict JSON, then tolerant JSON, then the text itself as the body of a generic push.
public enum WebhookParser {
    public enum Rejection: Error, Equatable {
        /// 400 `invalid request body: <reason>`; the reason says what and where (Uptime Kuma shows it verbatim).
        case invalidBody(String)
        /// 415: the content type is neither JSON, a form nor text.
        case unsupportedMediaType
    }

    public static func parse(_ request: HTTPRequest) -> Result<AlertEvent, Rejection> {
        var steps = 0
        return parse(request, steps: &steps)
    }

    /// `parse(_:)`, adding to `steps` the bytes every parser it ran visited (the form reader, strict and tolerant
    /// JSON): the tests hold each path to a bounded multiple of the body by this count (`ParserWorkTests`).
    static func parse(_ request: HTTPRequest, steps: inout Int) -> Result<AlertEvent, Rejection> {
        if request.method == "GET" { return fromQuery(request.rawQuery, steps: &steps) }
        switch request.mediaType {
        case "application/json", "text/json":
            return fromJSONBody(request.body, steps: &steps)
        case let type? where type.hasPrefix("application/") && type.hasSuffix("+json"):
            return fromJSONBody(request.body, steps: &steps)
        case "multipart/form-data":
            return fromMultipart(request.formFields, steps: &steps)
        case "application/x-www-form-urlencoded", "text/plain":
            return fromText(request.body, steps: &steps)
        default:
            return .failure(.unsupportedMediaType)
        }
    }

    /// `application/json`: axios only sends valid JSON here (it stringifies text that does not parse), so the body
    /// must parse strictly. An object is used as it is; a JSON string is custom text (#7211), read as a text body is:
    /// a form the relay reads (`title=…&body=…`, a custom body sent with a JSON content type) or text.
    static func fromJSONBody(_ bytes: [UInt8], steps: inout Int) -> Result<AlertEvent, Rejection> {
        guard bytes.contains(where: { !$0.isJSONWhitespace }) else { return .failure(.invalidBody("empty body")) }
        let value: JSONValue
        do {
            value = try JSONParser.parse(bytes, keeping: keysRead, steps: &steps)
        } catch {
            return .failure(.invalidBody(error.description))
        }
        if value.isObject { return fromObject(value) }
        if let text = value.stringValue {
            if let fields = FormText.fields(text, steps: &steps) { return fromFields(fields, steps: &steps) }
            return CustomText.event(text, unwrapped: true, steps: &steps)
        }
        return .failure(.invalidBody("the JSON holds no object and no text"))
    }

    /// urlencoded and text/plain: a form that names a field the relay reads, else custom text.
    static func fromText(_ bytes: [UInt8], steps: inout Int) -> Result<AlertEvent, Rejection> {
        guard let text = String(validating: bytes, as: UTF8.self) else {
            return .failure(.invalidBody("the body is not UTF-8 (byte \(firstInvalidUTF8(bytes)))"))
        }
        if let fields = FormText.fields(text, steps: &steps) { return fromFields(fields, steps: &steps) }
        return CustomText.event(text, unwrapped: false, steps: &steps)
    }

    /// The offset of the first byte that starts no valid UTF-8 sequence, for the error message.
    static func firstInvalidUTF8(_ bytes: [UInt8]) -> Int {
        var parser = Unicode.UTF8.ForwardParser()
        var iterator = bytes.makeIterator()
        var offset = 0
        while true {
            switch parser.parseScalar(from: &iterator) {
            case .valid(let scalar): offset += scalar.count
            case .error: return offset
            case .emptyInput: return offset
            }
        }
    }

    /// Uptime Kuma's form-data mode: one `data` part holding the JSON (a template's own fields are read too).
    static func fromMultipart(_ parts: [(name: String, value: [UInt8])], steps: inout Int) -> Result<AlertEvent, Rejection> {
        var fields: [String: String] = [:]
        for part in parts {
            guard let value = String(validating: part.value, as: UTF8.self) else {
                return .failure(.invalidBody("form-data field \(part.name) is not UTF-8"))
            }
            fields[part.name] = value
        }
        guard fields["data"] != nil || fields.keys.contains(where: FormText.knownNames.contains) else {
            return .failure(.invalidBody("no data field in the form-data"))
        }
        return fromFields(fields, steps: &steps)
    }

    /// A decoded form: `data` holds Uptime Kuma's JSON (read as custom text, so an unescaped one works too);
    /// otherwise bracket notation or flat `title`/`body`/`msg` fields.
    static func fromFields(_ fields: [String: String], steps: inout Int) -> Result<AlertEvent, Rejection> {
        if let data = fields["data"] { return CustomText.event(data, unwrapped: false, steps: &steps) }
        return fromFlatFields(fields)
    }

    /// GET mode (Uptime Kuma 2.1+): `msg`, and `heartbeat`/`monitor` as JSON texts; `+` is a space.
    static func fromQuery(_ query: String, steps: inout Int) -> Result<AlertEvent, Rejection> {
        guard let parameters = QueryString.parse(query, steps: &steps) else {
            return .failure(.invalidBody("the query string has an invalid %-escape or is not UTF-8"))
        }
        var members: [(key: String, value: JSONValue)] = []
        for key in ["heartbeat", "monitor"] {
            guard let text = parameters[key] else { continue }
            do {
                members.append((key, try JSONParser.parse(Array(text.utf8), keeping: keysRead, steps: &steps)))
            } catch {
                return .failure(.invalidBody("query parameter \(key): \(error.description)"))
            }
        }
        for key in genericTitleKeys + genericBodyKeys where parameters[key] != nil {
            members.append((key, .string(parameters[key] ?? "")))
        }
        return fromObject(.object(members))
    }

    /// Generic notifications: the common names of notification templates, first match wins.
    static let genericTitleKeys = ["title", "subject"]
    static let genericBodyKeys = ["body", "message", "text", "msg"]

    /// The only keys the relay reads, at any depth; everything else is validated and dropped while parsing.
    static let keysRead = JSONParser.KeptKeys(
        ["heartbeat", "monitor", "status", "important", "monitorID", "name", "id"]
            + genericTitleKeys + genericBodyKeys)

    /// Uptime Kuma's shape when it has `heartbeat` or `monitor`; a lone `msg` is its Test/certificate shape;
    /// otherwise the generic `title`/`subject` + `body`/`message`/`text`/`msg`.
    static func fromObject(_ object: JSONValue) -> Result<AlertEvent, Rejection> {
        if object["heartbeat"] != nil || object["monitor"] != nil {
            // Not Uptime Kuma's shape after all — a template's `"monitor":"{{name}}"`, or `"{{heartbeatJSON}}"`
            // rendered as `[object Object]` — but its text fields still make a push (SPEC §2.2: 400 only for an
            // object with none of them): an alert, never a Test that waits. Without any, or with objects whose
            // fields have the wrong types, the shape's own error says what was wrong.
            let notObjects = [object["heartbeat"], object["monitor"]].contains { $0.map { !$0.isObject && !$0.isNull } ?? false }
            guard notObjects, let event = textAlert(object) else { return uptimeKuma(object) }
            return .success(event)
        }
        return generic(object)
    }

    /// A generic alert from whatever text fields `object` has (`msg` as the body when nothing else is), or nil.
    static func textAlert(_ object: JSONValue) -> AlertEvent? {
        let title = genericTitleKeys.lazy.compactMap { object[$0]?.stringValue }.first
        guard let body = genericBodyKeys.lazy.compactMap({ object[$0]?.stringValue }).first ?? (title == nil ? nil : "") else {
            return nil
        }
        return AlertEvent(kind: .generic, title: title ?? "", message: body)
    }

    /// The generic shape: `title`/`subject` and `body`/`message`/`text`/`msg`; `msg` alone is a Test-like alert.
    static func generic(_ object: JSONValue) -> Result<AlertEvent, Rejection> {
        let untitled = genericTitleKeys.allSatisfy { object[$0]?.stringValue == nil }
        if untitled, let message = object["msg"]?.stringValue, genericBodyKeys.allSatisfy({ $0 == "msg" || object[$0]?.stringValue == nil }) {
            return .success(.test(message))
        }
        guard let event = textAlert(object) else { return .failure(.invalidBody("no title, body or msg field")) }
        return .success(event)
    }

    /// `{heartbeat, monitor, msg}`. Absent and null are the same to Uptime Kuma, so they are here; a field of the
    /// wrong type is named in the rejection.
    static func uptimeKuma(_ object: JSONValue) -> Result<AlertEvent, Rejection> {
        func wrong(_ field: String, _ expected: String) -> Result<AlertEvent, Rejection> {
            .failure(.invalidBody("\(field) is not \(expected)"))
        }
        guard let heartbeat = optional(object["heartbeat"], \.isObject) else { return wrong("heartbeat", "an object") }
        guard let monitor = optional(object["monitor"], \.isObject) else { return wrong("monitor", "an object") }
        guard let message = optionalString(object["msg"]) else { return wrong("msg", "a string") }
        guard let heartbeat = heartbeat.value, let monitor = monitor.value else {
            return .success(.test(message.value ?? ""))
        }
        guard let status = optionalInt(heartbeat["status"]) else { return wrong("heartbeat.status", "an integer") }
        guard let beatMessage = optionalString(heartbeat["msg"]) else { return wrong("heartbeat.msg", "a string") }
        guard let important = optional(heartbeat["important"], { $0.boolValue != nil }) else {
            return wrong("heartbeat.important", "a boolean")
        }
        guard let name = optionalString(monitor["name"]) else { return wrong("monitor.name", "a string") }
        guard let id = optionalInt(monitor["id"] ?? heartbeat["monitorID"]) else { return wrong("monitor.id", "an integer") }
        return .success(
            AlertEvent(
                kind: .monitor, status: status.value.flatMap(AlertEvent.Status.init(rawValue:)),
                important: important.value?.boolValue ?? true, monitorID: id.value,
                monitorName: name.value ?? "", message: beatMessage.value ?? ""))
    }

    /// Bracket-notation forms (`heartbeat[status]=0&monitor[name]=DB&msg=…`), which Uptime Kuma's JSON mode produces
    /// when a user overrides the Content-Type to urlencoded; and flat `title`/`body`/`msg` fields.
    static func fromFlatFields(_ fields: [String: String]) -> Result<AlertEvent, Rejection> {
        var heartbeat: [(key: String, value: JSONValue)] = []
        var monitor: [(key: String, value: JSONValue)] = []
        var members: [(key: String, value: JSONValue)] = []
        for (key, value) in fields.sorted(by: { $0.key < $1.key }) {
            if key.hasPrefix("heartbeat["), key.hasSuffix("]") {
                let name = String(key.dropFirst(10).dropLast())
                heartbeat.append((name, formValue(value, typed: typedFormFields.contains(name))))
            } else if key.hasPrefix("monitor["), key.hasSuffix("]") {
                let name = String(key.dropFirst(8).dropLast())
                monitor.append((name, formValue(value, typed: typedFormFields.contains(name))))
            } else if FormText.knownNames.contains(key) {
                members.append((key, .string(value)))
            }
        }
        if !heartbeat.isEmpty { members.append(("heartbeat", .object(heartbeat))) }
        if !monitor.isEmpty { members.append(("monitor", .object(monitor))) }
        return fromObject(.object(members))
    }

    /// The bracket-form fields the relay reads as numbers or booleans; every other one (a monitor named `2024`, a
    /// heartbeat message `503`) stays text.
    static let typedFormFields: Set = ["status", "important", "monitorID", "id"]

    /// A form value as the JSON value it stood for: numbers and booleans lose their type in a form, so a field the
    /// relay reads typed gets it back.
    static func formValue(_ text: String, typed: Bool) -> JSONValue {
        guard typed else { return .string(text) }
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
