/// APNs' error responses: `{"reason":"BadDeviceToken"}` (plus `timestamp` on 410).
public enum APNsErrorBody {
    /// The reason, reduced to a short alphanumeric identifier (what APNs sends); "" when there is none. Anything
    /// else a server might put there is not worth storing or logging verbatim.
    public static func reason(_ body: [UInt8]) -> String {
        guard !body.isEmpty, let reason = (try? JSONParser.parse(body))?["reason"]?.stringValue else { return "" }
        return String(reason.prefix(64).filter { $0.isASCII && ($0.isLetter || $0.isNumber) })
    }
}
