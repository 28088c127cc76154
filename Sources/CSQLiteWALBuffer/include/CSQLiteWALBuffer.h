#ifndef CSQLITE_WAL_BUFFER_H
#define CSQLITE_WAL_BUFFER_H

// The "kumapush-wal" SQLite VFS: the unix VFS, with each transaction's WAL frames written in one call at its commit
// (wal_buffer.c says how and why it is safe). A C target of its own, as CAllocator: a VFS is a table of C callbacks
// that SQLite calls on its own terms, and C types stay out of the Swift modules.

/// Registers the VFS (not as SQLite's default) and returns SQLite's result code. Call once, before any connection
/// opens with it: SQLiteConnection does, from its once-only process setup.
int CSQLiteWALBuffer_register(void);

/// The VFS's name, for sqlite3_open_v2.
extern const char *const CSQLiteWALBuffer_name;

#endif
