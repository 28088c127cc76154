/// The HTTP method as metrics and logs name it. libmicrohttpd accepts any method token, so the raw text is chosen
/// by whoever connects: used as a label it would grow `/metrics` without bound (issue 13: 550 KB after 2,000
/// random methods). Known methods keep their name; everything else is `other`.
enum MethodLabel {
    static let known: Set<String> = ["GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS", "CONNECT", "TRACE"]

    static func of(_ method: String) -> String { known.contains(method) ? method : "other" }
}
