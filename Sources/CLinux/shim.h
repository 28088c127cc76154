#ifndef CLINUX_SHIM_H
#define CLINUX_SHIM_H
// Linux interfaces Foundation's Glibc module does not export: epoll and eventfd for the event loop,
// TCP_NODELAY for HTTP/2 sockets, prctl for thread names, a thread's own id and nice value. Header-only;
// nothing to link.
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <netdb.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <unistd.h>
#include <errno.h>
#include <limits.h>

// Names the calling thread for the kernel (15 bytes kept). prctl is variadic, which Swift cannot call.
static inline int clinux_set_thread_name(const char *name) { return prctl(PR_SET_NAME, name, 0, 0, 0); }

// The calling thread's kernel id and nice value (INT_MIN when it cannot be read), and a new nice value for it. On
// Linux each thread has a nice value of its own, and getpriority/setpriority(PRIO_PROCESS, 0) read and change the
// calling thread's alone (setpriority(2), "BUGS"); getpriority's -1 is a valid value, so errno tells.
static inline int clinux_thread_id(void) { return (int) gettid(); }
static inline int clinux_thread_nice(void) {
    errno = 0;
    int nice = getpriority(PRIO_PROCESS, 0);
    return (nice == -1 && errno != 0) ? INT_MIN : nice;
}
static inline int clinux_set_thread_nice(int nice) { return setpriority(PRIO_PROCESS, 0, nice); }
#endif
