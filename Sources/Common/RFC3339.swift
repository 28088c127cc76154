import Foundation

/// RFC 3339 UTC timestamps as the API shows them (`2026-09-20T12:00:00Z`, whole seconds) and as logs show them
/// (milliseconds). Formatting is done by hand from the calendar fields: it is on hot paths and must be thread-safe.
public enum RFC3339 {
    /// `2026-09-20T12:00:00Z` for a time in milliseconds since 1970.
    public static func string(epochMillis: Int64) -> String {
        let fields = civil(epochSeconds: floorDivide(epochMillis, 1000))
        return fields + "Z"
    }

    /// `2026-09-20T12:00:00.123Z`.
    public static func millisecondString(_ date: Date) -> String {
        let millis = Int64((date.timeIntervalSince1970 * 1000).rounded(.down))
        let fraction = millis - floorDivide(millis, 1000) * 1000
        return civil(epochSeconds: floorDivide(millis, 1000)) + "." + pad(Int(fraction), 3) + "Z"
    }

    /// Parses `2026-09-20T12:00:00Z` (also with a fraction or a `+00:00` offset) into milliseconds since 1970.
    public static func parse(_ text: String) -> Int64? {
        let formatter = ISO8601DateFormatter()
        formatter.formatOptions = [.withInternetDateTime]
        if let date = formatter.date(from: text) { return Int64(date.timeIntervalSince1970 * 1000) }
        formatter.formatOptions = [.withInternetDateTime, .withFractionalSeconds]
        if let date = formatter.date(from: text) { return Int64((date.timeIntervalSince1970 * 1000).rounded()) }
        return nil
    }

    /// `HH:MM` UTC, for short human notices such as "event at 14:03 UTC".
    public static func clockString(epochMillis: Int64) -> String {
        let seconds = floorDivide(epochMillis, 1000)
        let secondOfDay = seconds - floorDivide(seconds, 86_400) * 86_400
        return pad(Int(secondOfDay / 3600), 2) + ":" + pad(Int(secondOfDay % 3600 / 60), 2)
    }

    private static func civil(epochSeconds: Int64) -> String {
        let days = floorDivide(epochSeconds, 86_400)
        let secondOfDay = epochSeconds - days * 86_400
        // Howard Hinnant's days-to-civil algorithm (proleptic Gregorian calendar).
        let z = days + 719_468
        let era = floorDivide(z, 146_097)
        let dayOfEra = z - era * 146_097
        let yearOfEra = (dayOfEra - dayOfEra / 1460 + dayOfEra / 36_524 - dayOfEra / 146_096) / 365
        let dayOfYear = dayOfEra - (365 * yearOfEra + yearOfEra / 4 - yearOfEra / 100)
        let mp = (5 * dayOfYear + 2) / 153
        let day = dayOfYear - (153 * mp + 2) / 5 + 1
        let month = mp < 10 ? mp + 3 : mp - 9
        let year = yearOfEra + era * 400 + (month <= 2 ? 1 : 0)
        return "\(pad(Int(year), 4))-\(pad(Int(month), 2))-\(pad(Int(day), 2))T"
            + "\(pad(Int(secondOfDay / 3600), 2)):\(pad(Int(secondOfDay % 3600 / 60), 2)):\(pad(Int(secondOfDay % 60), 2))"
    }

    private static func floorDivide(_ a: Int64, _ b: Int64) -> Int64 {
        let q = a / b
        return (a % b != 0 && (a < 0) != (b < 0)) ? q - 1 : q
    }

    private static func pad(_ value: Int, _ width: Int) -> String {
        let digits = String(value)
        return digits.count >= width ? digits : String(repeating: "0", count: width - digits.count) + digits
    }
}
