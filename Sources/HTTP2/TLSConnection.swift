internal import COpenSSL
import Foundation

/// One TLS session over memory BIOs: ciphertext goes in with `feed` and comes out with `drainCiphertext`;
/// plaintext goes in with `write` and comes out with `read`. No sockets here, so it can be driven by any loop.
/// Owned by one event loop; not thread-safe.
final class TLSConnection {
    enum HandshakeState { case inProgress, done }

    private let ssl: OpaquePointer
    private let incoming: OpaquePointer  // BIO the peer's ciphertext is written into
    private let outgoing: OpaquePointer  // BIO our ciphertext is read from

    /// A client connection to `host`: SNI for names (not for IP literals, RFC 6066 §3), and the certificate must
    /// match the name or IP address.
    init(clientOf context: TLSContext, host: String) throws {
        (ssl, incoming, outgoing) = try Self.sessionWithMemoryBIOs(context)
        SSL_set_connect_state(ssl)
        if Self.isIPLiteral(host) {
            guard X509_VERIFY_PARAM_set1_ip_asc(SSL_get0_param(ssl), host) == 1 else { throw TLSError("bad IP \(host)") }
        } else {
            guard COpenSSL_SSL_set_tlsext_host_name(ssl, host) == 1, SSL_set1_host(ssl, host) == 1 else {
                throw TLSError("bad host name \(host)")
            }
        }
    }

    /// A server connection.
    init(serverOf context: TLSContext) throws {
        (ssl, incoming, outgoing) = try Self.sessionWithMemoryBIOs(context)
        SSL_set_accept_state(ssl)
    }

    /// A new SSL with a memory BIO each way. SSL_set_bio hands both BIOs to the SSL; SSL_free frees them.
    private static func sessionWithMemoryBIOs(_ context: TLSContext) throws -> (OpaquePointer, OpaquePointer, OpaquePointer) {
        guard let ssl = SSL_new(context.handle) else { throw TLSError("SSL_new") }
        guard let incoming = BIO_new(BIO_s_mem()), let outgoing = BIO_new(BIO_s_mem()) else {
            SSL_free(ssl)
            throw TLSError("BIO_new")
        }
        SSL_set_bio(ssl, incoming, outgoing)
        return (ssl, incoming, outgoing)
    }

    deinit { SSL_free(ssl) }

    /// Hands the peer's bytes to OpenSSL.
    func feed(_ bytes: UnsafeRawBufferPointer) {
        var offset = 0
        while offset < bytes.count {
            let written = BIO_write(incoming, bytes.baseAddress! + offset, Int32(bytes.count - offset))
            precondition(written > 0, "BIO_write to a memory BIO failed")
            offset += Int(written)
        }
    }

    /// Advances the handshake with what has been fed so far.
    func handshake() throws -> HandshakeState {
        ERR_clear_error()
        let result = SSL_do_handshake(ssl)
        if result == 1 { return .done }
        switch SSL_get_error(ssl, result) {
        case SSL_ERROR_WANT_READ, SSL_ERROR_WANT_WRITE: return .inProgress
        default:
            let verify = SSL_get_verify_result(ssl)
            if verify != X509_V_OK {
                throw TLSError(message: "TLS handshake failed: certificate verification: \(String(cString: X509_verify_cert_error_string(verify)))")
            }
            throw TLSError("TLS handshake failed")
        }
    }

    /// The protocol ALPN selected, e.g. "h2".
    var negotiatedProtocol: String? {
        var data: UnsafePointer<UInt8>?
        var length: UInt32 = 0
        SSL_get0_alpn_selected(ssl, &data, &length)
        guard let data, length > 0 else { return nil }
        return String(decoding: UnsafeBufferPointer(start: data, count: Int(length)), as: UTF8.self)
    }

    enum ReadResult {
        case bytes(Int)
        case wantMore, closed
    }

    /// Decrypts into `buffer`.
    func read(into buffer: UnsafeMutableRawBufferPointer) throws -> ReadResult {
        ERR_clear_error()
        let count = SSL_read(ssl, buffer.baseAddress, Int32(buffer.count))
        if count > 0 { return .bytes(Int(count)) }
        switch SSL_get_error(ssl, count) {
        case SSL_ERROR_WANT_READ, SSL_ERROR_WANT_WRITE: return .wantMore
        case SSL_ERROR_ZERO_RETURN: return .closed
        default: throw TLSError("TLS read failed")
        }
    }

    /// Encrypts all of `bytes` (memory BIOs never push back).
    func write(_ bytes: UnsafeRawBufferPointer) throws {
        guard bytes.count > 0 else { return }
        ERR_clear_error()
        var offset = 0
        while offset < bytes.count {
            let written = SSL_write(ssl, bytes.baseAddress! + offset, Int32(bytes.count - offset))
            guard written > 0 else { throw TLSError("TLS write failed") }
            offset += Int(written)
        }
    }

    /// Ciphertext waiting to go to the peer.
    func drainCiphertext(into output: inout [UInt8]) {
        let pending = Int(BIO_ctrl_pending(outgoing))
        guard pending > 0 else { return }
        let start = output.count
        output.append(contentsOf: repeatElement(0, count: pending))
        let read = output.withUnsafeMutableBytes { BIO_read(outgoing, $0.baseAddress! + start, Int32(pending)) }
        output.removeLast(pending - max(0, Int(read)))
    }

    /// Queues close_notify.
    func shutdown() { _ = SSL_shutdown(ssl) }

    static func isIPLiteral(_ host: String) -> Bool {
        var v4 = in_addr()
        var v6 = in6_addr()
        return inet_pton(AF_INET, host, &v4) == 1 || inet_pton(AF_INET6, host, &v6) == 1
    }
}
