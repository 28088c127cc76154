#ifndef CLIBPQ_SHIM_H
#define CLIBPQ_SHIM_H
// libpq, PostgreSQL's C client (Debian: libpq-dev; the header lives in /usr/include/postgresql, which the
// pkg-config file `libpq` adds to the search path). Nothing here needs a wrapper yet.
#include <libpq-fe.h>
#endif
