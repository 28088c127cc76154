internal import COpenSSL
import Foundation

/// An OpenSSL `SSL_CTX`: the settings shared by every connection of one side. Owns the handle; freed in `deinit`.
public final class TLSContext: @unchecked Sendable {
    // @unchecked Sendable: an SSL_CTX is configured once in init and afterwards only read by SSL_new, which OpenSSL
    // documents as thread-safe ("SSL_CTX objects may be shared between threads once configured").

    let handle: OpaquePointer

    /// A client context: TLS ≥ 1.2, ALPN offering only `h2`, peer verification against the system trust store
    /// plus `extraCAFile` (PEM) when given.
    public static func client(extraCAFile: String? = nil) throws -> TLSContext {
        guard let ctx = SSL_CTX_new(TLS_client_method()) else { throw TLSError("SSL_CTX_new") }
        let context = TLSContext(handle: ctx)
        guard COpenSSL_SSL_CTX_set_min_proto_version(ctx, TLS1_2_VERSION) == 1 else { throw TLSError("TLS 1.2 minimum") }
        SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER, nil)
        guard SSL_CTX_set_default_verify_paths(ctx) == 1 else { throw TLSError("system trust store") }
        if let extraCAFile {
            guard SSL_CTX_load_verify_locations(ctx, extraCAFile, nil) == 1 else {
                throw TLSError("cannot load CA file \(extraCAFile)")
            }
        }
        // ALPN wire format: length-prefixed protocol names. SSL_CTX_set_alpn_protos returns 0 on success.
        let protocols: [UInt8] = [2, UInt8(ascii: "h"), UInt8(ascii: "2")]
        guard SSL_CTX_set_alpn_protos(ctx, protocols, UInt32(protocols.count)) == 0 else { throw TLSError("ALPN") }
        return context
    }

    /// A server context with a PEM certificate chain and private key, selecting `h2` by ALPN.
    public static func server(certificateChainFile: String, privateKeyFile: String) throws -> TLSContext {
        guard let ctx = SSL_CTX_new(TLS_server_method()) else { throw TLSError("SSL_CTX_new") }
        let context = TLSContext(handle: ctx)
        guard COpenSSL_SSL_CTX_set_min_proto_version(ctx, TLS1_2_VERSION) == 1 else { throw TLSError("TLS 1.2 minimum") }
        guard SSL_CTX_use_certificate_chain_file(ctx, certificateChainFile) == 1 else {
            throw TLSError("cannot load certificate \(certificateChainFile)")
        }
        guard SSL_CTX_use_PrivateKey_file(ctx, privateKeyFile, SSL_FILETYPE_PEM) == 1 else {
            throw TLSError("cannot load private key \(privateKeyFile)")
        }
        SSL_CTX_set_alpn_select_cb(ctx, selectH2, nil)
        return context
    }

    private init(handle: OpaquePointer) { self.handle = handle }

    deinit { SSL_CTX_free(handle) }
}

/// ALPN selection on the server: `h2` or nothing (then the handshake fails with no_application_protocol).
private let selectH2:
    @convention(c) (
        OpaquePointer?, UnsafeMutablePointer<UnsafePointer<UInt8>?>?, UnsafeMutablePointer<UInt8>?,
        UnsafePointer<UInt8>?, UInt32, UnsafeMutableRawPointer?
    ) -> Int32 = { _, out, outLength, offered, offeredLength, _ in
        guard let out, let outLength, let offered else { return SSL_TLSEXT_ERR_ALERT_FATAL }
        var index = 0
        while index < Int(offeredLength) {
            let length = Int(offered[index])
            if length == 2, index + 2 < Int(offeredLength), offered[index + 1] == UInt8(ascii: "h"), offered[index + 2] == UInt8(ascii: "2") {
                out.pointee = offered + index + 1
                outLength.pointee = 2
                return SSL_TLSEXT_ERR_OK
            }
            index += length + 1
        }
        return SSL_TLSEXT_ERR_ALERT_FATAL
    }
