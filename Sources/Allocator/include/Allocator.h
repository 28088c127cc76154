#ifndef KUMAPUSH_ALLOCATOR_H
#define KUMAPUSH_ALLOCATOR_H

/// The allocator serving this process's `malloc`: "jemalloc <version>" when it is jemalloc's (as linked), else the
/// file its `malloc` comes from ("libc.so.6" with glibc's; the binary itself under a sanitizer, which brings its own).
/// Into `buffer`, NUL-terminated, cut to `size`; returns `buffer`.
const char *kumapush_allocator(char *buffer, unsigned long size);

/// The jemalloc options this binary was built with (`malloc_conf`); MALLOC_CONF in the environment overrides them.
const char *kumapush_allocator_options(void);

#endif
