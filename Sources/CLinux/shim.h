#ifndef CLINUX_SHIM_H
#define CLINUX_SHIM_H
// Linux interfaces Foundation's Glibc module does not export: epoll and eventfd for the event loop,
// TCP_NODELAY for HTTP/2 sockets. Header-only; nothing to link.
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <netdb.h>
#endif
