#ifndef COPENSSL_SHIM_H
#define COPENSSL_SHIM_H
#include <openssl/crypto.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/rand.h>
#include <openssl/sha.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>
#include <openssl/pem.h>
#include <openssl/ec.h>
#include <openssl/ecdsa.h>
#include <openssl/bn.h>

// Function-like macros Swift cannot call, wrapped as real functions.
// https://www.openssl.org/docs/man3.0/man3/ — delete each when OpenSSL exports a function of the same meaning.

/// SSL_set_tlsext_host_name is a macro over SSL_ctrl (sets SNI).
static inline int COpenSSL_SSL_set_tlsext_host_name(SSL *ssl, const char *name) {
    return SSL_set_tlsext_host_name(ssl, name);
}

/// SSL_CTX_set_min_proto_version is a macro over SSL_CTX_ctrl.
static inline int COpenSSL_SSL_CTX_set_min_proto_version(SSL_CTX *ctx, int version) {
    return SSL_CTX_set_min_proto_version(ctx, version);
}

/// BIO_get_mem_data is a macro over BIO_ctrl.
static inline long COpenSSL_BIO_get_mem_data(BIO *bio, char **data) {
    return BIO_get_mem_data(bio, data);
}

/// SSL_CTX_set_mode is a macro over SSL_CTX_ctrl.
static inline long COpenSSL_SSL_CTX_set_mode(SSL_CTX *ctx, long mode) {
    return SSL_CTX_set_mode(ctx, mode);
}

#endif
