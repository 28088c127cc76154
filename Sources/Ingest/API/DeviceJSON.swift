import Common
import Queue

/// The device object of SPEC §2.1, field order as the reference relay (the app decodes by name).
enum DeviceJSON {
    static func render(_ device: Device, authToken: String? = nil) -> String {
        var text = "{\"id\":\(JSONText.quoted(device.id)),\"device_token\":\(JSONText.quoted(device.token))"
        let last = device.lastSuccessfulNotification.map { RFC3339.string(epochMillis: $0) } ?? ""
        text += ",\"last_successful_notification\":\"\(last)\""
        text += ",\"date_added\":\"\(RFC3339.string(epochMillis: device.dateAdded))\""
        text += ",\"down_notification_level\":\"\(device.downNotificationLevel.rawValue)\""
        text += ",\"last_delivery_error\":\(JSONText.quoted(device.lastDeliveryError))"
        if let authToken { text += ",\"auth_token\":\(JSONText.quoted(authToken))" }
        return text + "}"
    }
}
