internal import CMicroHTTPD

/// The libmicrohttpd the ingest server runs on.
public enum HTTPServerLibrary {
    public static var version: String { String(cString: MHD_get_version()) }
}
