#ifndef CMICROHTTPD_SHIM_H
#define CMICROHTTPD_SHIM_H
#include <stdarg.h>
#include <stdint.h>
#include <stddef.h>
#include <stdio.h>
#include <sys/types.h>
#include <sys/select.h>
#include <sys/socket.h>
#include <netinet/in.h>
#include <microhttpd.h>

// libmicrohttpd's start and info calls are variadic, which Swift cannot call; these wrappers pass fixed arguments.
// https://www.gnu.org/software/libmicrohttpd/manual/html_node/microhttpd_002dinit.html
// Delete when Swift can call C variadic functions (it cannot as of Swift 6.3).

/// What the Swift server configures on its daemon.
struct CMicroHTTPD_Config {
    unsigned int flags;
    const struct sockaddr *address;   // IPv4 or IPv6 listen address, port included; NULL: no listening socket
                                      // (connections come through MHD_add_connection, flags hold MHD_USE_NO_LISTEN_SOCKET)
    unsigned int thread_pool_size;    // 1: one internal epoll thread; more: a pool of them
    unsigned int connection_limit;
    unsigned int connection_timeout;  // seconds of inactivity before MHD closes a connection (slowloris guard)
    size_t connection_memory_limit;   // per-connection buffer for headers (bounds header size)
};

typedef void *(*CMicroHTTPD_URILogCallback)(void *cls, const char *uri, struct MHD_Connection *connection);

/// Receives libmicrohttpd's error log: the message's format (fixed text with placeholders, never a client's bytes)
/// and the message itself, formatted into at most 255 bytes (it may hold a request's URL).
typedef void (*CMicroHTTPD_MessageCallback)(void *cls, const char *format, const char *message);

/// Where MHD_OPTION_EXTERNAL_LOGGER's messages go. Must outlive the daemon.
struct CMicroHTTPD_MessageSink {
    CMicroHTTPD_MessageCallback callback;
    void *cls;
};

/// MHD_LogCallback takes a va_list, which Swift cannot read: the message is formatted here.
static inline void CMicroHTTPD_format_message(void *cls, const char *format, va_list arguments) {
    const struct CMicroHTTPD_MessageSink *sink = (const struct CMicroHTTPD_MessageSink *) cls;
    char message[256];
    vsnprintf(message, sizeof message, format, arguments);
    sink->callback(sink->cls, format, message);
}

/// MHD_start_daemon with every option as a fixed argument (MHD_OPTION_ARRAY is copied during the call).
/// `accept` may refuse a connection by its peer address before any byte is read; `notify` hears of every
/// connection opened and closed (both used for limits MHD does not have: per-client caps, request deadlines).
/// `messages` hears libmicrohttpd's error log when `flags` include MHD_USE_ERROR_LOG.
static inline struct MHD_Daemon *CMicroHTTPD_start(const struct CMicroHTTPD_Config *config,
                                                   MHD_AccessHandlerCallback handler, void *handler_cls,
                                                   MHD_RequestCompletedCallback completed, void *completed_cls,
                                                   CMicroHTTPD_URILogCallback uri_log, void *uri_log_cls,
                                                   MHD_AcceptPolicyCallback accept, void *accept_cls,
                                                   MHD_NotifyConnectionCallback notify, void *notify_cls,
                                                   const struct CMicroHTTPD_MessageSink *messages) {
    struct MHD_OptionItem options[] = {
        { MHD_OPTION_EXTERNAL_LOGGER, (intptr_t) CMicroHTTPD_format_message, (void *) messages },
        { MHD_OPTION_NOTIFY_COMPLETED, (intptr_t) completed, completed_cls },
        { MHD_OPTION_URI_LOG_CALLBACK, (intptr_t) uri_log, uri_log_cls },
        { MHD_OPTION_NOTIFY_CONNECTION, (intptr_t) notify, notify_cls },
        { MHD_OPTION_THREAD_POOL_SIZE, (intptr_t) config->thread_pool_size, NULL },
        { MHD_OPTION_CONNECTION_LIMIT, (intptr_t) config->connection_limit, NULL },
        { MHD_OPTION_CONNECTION_TIMEOUT, (intptr_t) config->connection_timeout, NULL },
        { MHD_OPTION_CONNECTION_MEMORY_LIMIT, (intptr_t) config->connection_memory_limit, NULL },
        // The last three bind a socket; without an address they end the list instead.
        { config->address ? MHD_OPTION_SOCK_ADDR : MHD_OPTION_END, 0, (void *) config->address },
        { MHD_OPTION_LISTENING_ADDRESS_REUSE, 1, NULL },
        { MHD_OPTION_LISTEN_BACKLOG_SIZE, 1024, NULL },
        { MHD_OPTION_END, 0, NULL },
    };
    return MHD_start_daemon(config->flags, 0, accept, accept_cls, handler, handler_cls,
                            MHD_OPTION_ARRAY, options, MHD_OPTION_END);
}

/// The socket of a connection, or -1 (MHD_get_connection_info is variadic).
static inline int CMicroHTTPD_connection_fd(struct MHD_Connection *connection) {
    const union MHD_ConnectionInfo *info = MHD_get_connection_info(connection, MHD_CONNECTION_INFO_CONNECTION_FD);
    return info ? info->connect_fd : -1;
}

/// The peer address of a connection (MHD_get_connection_info is variadic).
static inline const struct sockaddr *CMicroHTTPD_client_address(struct MHD_Connection *connection) {
    const union MHD_ConnectionInfo *info = MHD_get_connection_info(connection, MHD_CONNECTION_INFO_CLIENT_ADDRESS);
    return info ? info->client_addr : NULL;
}

/// The port the daemon listens on, useful after binding port 0 (MHD_get_daemon_info is variadic).
static inline uint16_t CMicroHTTPD_bound_port(struct MHD_Daemon *daemon) {
    const union MHD_DaemonInfo *info = MHD_get_daemon_info(daemon, MHD_DAEMON_INFO_BIND_PORT);
    return info ? info->port : 0;
}

/// Open connections right now.
static inline unsigned int CMicroHTTPD_current_connections(struct MHD_Daemon *daemon) {
    const union MHD_DaemonInfo *info = MHD_get_daemon_info(daemon, MHD_DAEMON_INFO_CURRENT_CONNECTIONS);
    return info ? info->num_connections : 0;
}

#endif
