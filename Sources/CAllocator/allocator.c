// The binary's memory allocator: jemalloc, from Debian (libjemalloc2), in place of glibc's malloc.
//
// Why: the deliverer's request and answer buffers are made on the delivery thread and freed on the connections'
// event loops (and ingest's requests on the HTTP threads, freed by the queue writer). glibc hands a chunk freed by
// another thread back to its owner's arena under that arena's lock, and that free was 12 % of an event loop's time
// (docs/performance.md, twenty-ninth session); jemalloc keeps it in the freeing thread's cache. Measured in
// alternated runs with the options below: 26.7 µs of deliverer CPU a push against 28.1 (six rounds), ingest about
// 28,300 webhooks/s against 26,300.
//
// Linked by name, before libc, so the binary's and every library's malloc resolve to jemalloc's (SQLite, OpenSSL,
// nghttp2 and libmicrohttpd allocate through it too). `kumapush_allocator` says which one a process really got.
#define _GNU_SOURCE
#include <dlfcn.h>
#include <jemalloc/jemalloc.h> // Debian's libjemalloc-dev (scripts/install-deps.sh)
#include <stdio.h>
#include <string.h>

#include "CAllocator.h"

// Read by jemalloc at its first allocation (MALLOC_CONF, if set, is applied after it). One arena, not four per CPU:
// the relay runs a handful of threads, each with its own cache in front of the arena, and every arena keeps pages of
// its own; thread caches hold blocks up to 4 KiB, not 32; freed pages decay over one second instead of ten (with no
// background thread, jemalloc returns them while the process goes on allocating: a deliverer or ingest at work does,
// an idle one keeps the last burst's pages until its next). Peak RSS of a 100,000-push drain 55–56 MiB against 61
// with jemalloc's defaults (52 with glibc), of ingest under wrk 50 against 52 with two arenas (47–48 with glibc), at
// the same CPU a push and the same webhooks a second. Returning pages at once (`dirty_decay_ms:0,muzzy_decay_ms:0`)
// saved 3 MiB more and cost 3.5 µs a push in madvise calls.
const char *malloc_conf = "narenas:1,tcache_max:4096,dirty_decay_ms:1000";

const char *kumapush_allocator(char *buffer, unsigned long size) {
    // Where the `malloc` this binary calls lives: the one dynamic linking chose, whatever was linked.
    Dl_info where;
    void *(*chosen)(size_t) = malloc;
    const char *file = dladdr((void *)chosen, &where) && where.dli_fname ? where.dli_fname : "unknown";
    if (strstr(file, "jemalloc") == NULL) {
        const char *name = strrchr(file, '/');
        snprintf(buffer, size, "%s", name ? name + 1 : file);
        return buffer;
    }
    // The options in force, read back: `malloc_conf` as jemalloc took it, after MALLOC_CONF and /etc/malloc.conf.
    const char *version = "unknown";
    size_t versionLength = sizeof(version);
    unsigned arenas = 0;
    size_t arenasLength = sizeof(arenas);
    size_t cacheMax = 0;
    size_t cacheMaxLength = sizeof(cacheMax);
    ssize_t decay = 0;
    size_t decayLength = sizeof(decay);
    mallctl("version", &version, &versionLength, NULL, 0);
    if (mallctl("opt.narenas", &arenas, &arenasLength, NULL, 0) != 0
        || mallctl("opt.tcache_max", &cacheMax, &cacheMaxLength, NULL, 0) != 0
        || mallctl("opt.dirty_decay_ms", &decay, &decayLength, NULL, 0) != 0) {
        snprintf(buffer, size, "jemalloc %s (options unreadable)", version);
    } else {
        snprintf(buffer, size, "jemalloc %s (narenas:%u,tcache_max:%zu,dirty_decay_ms:%zd)", version, arenas, cacheMax, decay);
    }
    return buffer;
}
