#ifndef CLINUX_SHIM_H
#define CLINUX_SHIM_H
// Linux interfaces Foundation's Glibc module does not export: epoll and eventfd for the event loop,
// TCP_NODELAY for HTTP/2 sockets, prctl for thread names. Header-only; nothing to link.
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <netdb.h>
#include <sys/prctl.h>

// Names the calling thread for the kernel (15 bytes kept). prctl is variadic, which Swift cannot call.
static inline int clinux_set_thread_name(const char *name) { return prctl(PR_SET_NAME, name, 0, 0, 0); }
#endif
