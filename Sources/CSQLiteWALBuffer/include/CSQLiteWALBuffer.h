#ifndef CSQLITE_WAL_BUFFER_H
#define CSQLITE_WAL_BUFFER_H

// The "kumapush-wal" SQLite VFS: the unix VFS, with the WAL frames a COMMIT writes sent in one call with its commit
// frame (wal_buffer.c says how and why it is safe). A C target of its own, as CAllocator: a VFS is a table of C callbacks
// that SQLite calls on its own terms, and C types stay out of the Swift modules.

/// Registers the VFS (not as SQLite's default) and returns SQLite's result code. Call once, before any connection
/// opens with it: SQLiteConnection does, from its once-only process setup.
int CSQLiteWALBuffer_register(void);

/// The VFS's name, for sqlite3_open_v2.
extern const char *const CSQLiteWALBuffer_name;

typedef struct sqlite3 sqlite3;

/// Around each COMMIT of a connection opened with the VFS: the WAL frames the COMMIT writes are gathered and go out in
/// one call with the commit frame; at any other time frames are written as they come. `endCommit` drops what a
/// failed COMMIT (`committed` 0) gathered. After one that succeeded nothing is left; should anything be (a defect), it
/// is dropped too and the result is SQLITE_INTERNAL, else SQLITE_OK. Both do nothing for a connection without a WAL
/// file of this VFS.
void CSQLiteWALBuffer_beginCommit(sqlite3 *db);
int CSQLiteWALBuffer_endCommit(sqlite3 *db, int committed);

#endif
