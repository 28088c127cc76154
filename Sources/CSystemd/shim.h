#ifndef CSYSTEMD_SHIM_H
#define CSYSTEMD_SHIM_H
// libsystemd's daemon interface (Debian: libsystemd-dev; libsystemd0 is on every systemd host): socket activation
// (sd_listen_fds, sd_is_socket) and service notification (sd_notify, sd_watchdog_enabled).
// https://www.freedesktop.org/software/systemd/man/latest/sd-daemon.html
// The calls used are not variadic, so nothing here needs a wrapper.
#include <systemd/sd-daemon.h>
#endif
