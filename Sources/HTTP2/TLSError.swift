internal import COpenSSL

/// A TLS failure with OpenSSL's error queue drained into text (never any key material).
public struct TLSError: Error, Sendable, CustomStringConvertible {
    public let description: String

    init(_ context: String) {
        var messages: [String] = []
        while true {
            let code = ERR_get_error()
            if code == 0 { break }
            var buffer = [CChar](repeating: 0, count: 256)
            ERR_error_string_n(code, &buffer, buffer.count)
            messages.append(String(decoding: buffer.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self))
        }
        description = messages.isEmpty ? context : "\(context): \(messages.joined(separator: "; "))"
    }

    init(message: String) { description = message }
}
