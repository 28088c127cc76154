internal import CNGHTTP2

/// The libnghttp2 the HTTP/2 client and server run on.
public enum HTTP2Library {
    public static var version: String {
        guard let info = nghttp2_version(0) else { return "unknown" }
        return String(cString: info.pointee.version_str)
    }
}
