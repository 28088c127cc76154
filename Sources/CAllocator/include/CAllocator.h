#ifndef KUMAPUSH_CALLOCATOR_H
#define KUMAPUSH_CALLOCATOR_H

/// The allocator serving this process's `malloc`, into `buffer` (NUL-terminated, cut to `size`), and `buffer`:
/// "jemalloc <version> (narenas:N,tcache_max:N,dirty_decay_ms:N)" with the options jemalloc applied when it is
/// jemalloc's (as linked); else the file its `malloc` comes from ("libc.so.6" with glibc's preloaded ahead; the
/// binary itself under a sanitizer, which brings its own).
const char *kumapush_allocator(char *buffer, unsigned long size);

#endif
