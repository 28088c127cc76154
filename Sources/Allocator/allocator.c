// The binary's memory allocator: jemalloc, from Debian (libjemalloc2), in place of glibc's malloc.
//
// Why: the deliverer's request and answer buffers are made on the delivery thread and freed on the connections'
// event loops (and ingest's requests on the HTTP threads, freed by the queue writer). glibc hands a chunk freed by
// another thread back to its owner's arena under that arena's lock, and that free was 12 % of an event loop's time
// (docs/performance.md, twenty-ninth session); jemalloc keeps it in the freeing thread's cache. Measured in
// alternated runs: 26.8 µs of deliverer CPU a push against 27.7, ingest 28,309 webhooks/s against 26,293.
//
// Linked by name, before libc, so the binary's and every library's malloc resolve to jemalloc's (SQLite, OpenSSL,
// nghttp2 and libmicrohttpd allocate through it too). `kumapush_allocator` says which one a process really got.
#define _GNU_SOURCE
#include <dlfcn.h>
#include <jemalloc/jemalloc.h>
#include <stdio.h>
#include <string.h>

#include "Allocator.h"

// Read by jemalloc at its first allocation (MALLOC_CONF, if set, is applied after it). One arena, not four per CPU:
// the relay runs a handful of threads, each with its own cache in front of the arena, and every arena keeps pages of
// its own; thread caches hold blocks up to 4 KiB, not 32; pages freed are returned after one second instead of ten.
// Peak RSS of a 100,000-push drain 55 MiB against 61 with jemalloc's defaults (52–53 with glibc), of ingest under
// wrk 50 against 52 with two arenas (47–48 with glibc), at the same CPU a push and the same webhooks a second.
// Returning pages at once (`dirty_decay_ms:0`) saved 3 MiB more and cost 3.5 µs a push in madvise calls.
const char *malloc_conf = "narenas:1,tcache_max:4096,dirty_decay_ms:1000";

const char *kumapush_allocator_options(void) { return malloc_conf; }

const char *kumapush_allocator(char *buffer, unsigned long size) {
    // Where the `malloc` this binary calls lives: the one dynamic linking chose, whatever was linked.
    Dl_info where;
    void *(*chosen)(size_t) = malloc;
    const char *file = dladdr((void *)chosen, &where) && where.dli_fname ? where.dli_fname : "unknown";
    if (strstr(file, "jemalloc") != NULL) {
        const char *version = "unknown";
        size_t length = sizeof(version);
        mallctl("version", &version, &length, NULL, 0);
        snprintf(buffer, size, "jemalloc %s", version);
    } else {
        const char *name = strrchr(file, '/');
        snprintf(buffer, size, "%s", name ? name + 1 : file);
    }
    return buffer;
}
