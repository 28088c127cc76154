// The "kumapush-wal" SQLite VFS: Debian's unix VFS, with the WAL frames a COMMIT writes gathered in memory and
// written to the -wal file in one call when the commit frame is complete.
//
// Why: SQLite writes every WAL frame with two calls, its 24-byte header and then the page
// (walWriteOneFrame, https://www.sqlite.org/fileformat2.html#walformat), and the kernel's buffered write works page
// by page of the file: a 4,120-byte frame cost two system calls and three page-cache write cycles. A group commit of
// 16 webhooks to 16 devices writes about 37 frames, so the queue writer spent a quarter of its time in `pwrite`
// (docs/performance.md, thirty-second session). Gathered, the same commit is one `pwrite` of contiguous bytes.
//
// Why it is safe, WAL file by WAL file (each belongs to one connection, which SQLite uses on one thread at a time):
// - Frames are gathered only while the connection runs COMMIT (`CSQLiteWALBuffer_beginCommit` … `endCommit`, which
//   SQLiteConnection.writeTransaction calls around it). There SQLite writes the transaction's remaining pages and
//   then its commit frame, in one call (sqlite3WalFrames). Frames written at any other time (a cache spill in the
//   middle of a transaction, which may yet roll back) go straight to the file, as with the unix VFS: a run left over
//   from a rolled-back transaction, written later, would overwrite frames another connection committed meanwhile.
// - Readers learn of a commit only from the wal-index header, which SQLite writes after the commit frame. The commit
//   frame's write returns only once the run is in the file, so a published frame is always there, and an error in
//   that write is the COMMIT's error.
// - A commit frame is told by its header: 24 bytes whose "database size after commit" field (bytes 4–7) is not zero.
//   Its page is the write that starts where that header ends. A commit header that does not continue the gathered
//   run (a single-frame transaction, or `walRewriteChecksums` rewriting it in place) is written through at once,
//   since no page may follow it.
// - Every other operation on the file (read, sync, truncate, size, lock, file control) writes the run out
//   first, so SQLite never reads its own frames from the file before they are there, and syncs what it wrote; a write
//   that does not continue the run writes the run out before itself, so the file sees the writes in SQLite's order.
// - Gathering ends with the commit frame: whatever the COMMIT writes after it goes straight out. With
//   `synchronous = FULL` and power-safe overwrite off (`psow=0`), SQLite repeats the commit frame up to the next sector
//   boundary and splits the write that crosses it around an `xSync`; those padding frames are published with the
//   commit, so none may wait in memory.
// - A COMMIT that fails drops what it gathered (`endCommit`): those frames belong to a transaction that did not
//   commit. One that succeeded has nothing left: every gathered byte comes before the commit frame, which wrote the
//   run out. Were anything left, it could not be written now (SQLite has let the WAL's write lock go, and another
//   process may be appending where it belongs), so `endCommit` drops it and reports SQLITE_INTERNAL.
//
// The database file, its shared memory and every other file are the unix VFS's own, untouched.

#include "CSQLiteWALBuffer.h"
#include <sqlite3.h>
#include <stdlib.h>
#include <string.h>

const char *const CSQLiteWALBuffer_name = "kumapush-wal";

enum {
    // Below 128 KiB: the unix VFS takes a write's length modulo 128 KiB (seekAndWriteFd masks it with 0x1ffff), so a
    // longer write is torn and reported as SQLITE_FULL. 31 frames of 4 KiB pages.
    CAPACITY = 126 * 1024,
    FRAME_HEADER_BYTES = 24,
};

typedef struct {
    sqlite3_file base;            // pMethods = &walMethods
    sqlite3_file *real;           // the unix VFS's file, in the memory right after this struct (szOsFile)
    unsigned char *run;           // gathered writes: `used` bytes that belong at `start` in the file; allocated by
                                  // the first COMMIT (readers and the checkpointer never gather)
    int used;
    sqlite3_int64 start;
    sqlite3_int64 commitPageAt;   // where the page of a gathered commit header starts; -1 when none waits
    int gathering;                // inside a COMMIT (beginCommit … endCommit)
} WALFile;

static sqlite3_vfs walVFS;
static sqlite3_io_methods walMethods;

static int writeThrough(WALFile *file, const void *data, int amount, sqlite3_int64 offset) {
    return file->real->pMethods->xWrite(file->real, data, amount, offset);
}

/// Writes the gathered run out. A run is never kept past a failure: it holds frames of the open transaction only (a
/// commit leaves it empty), and a failed write dooms that transaction (SQLite's pager enters its error state and
/// rolls back, discarding every frame of it). Written later, a failed commit's frames could pass for a commit in
/// the recovery after a crash.
static int writeOut(WALFile *file) {
    if (file->used == 0) return SQLITE_OK;
    int result = writeThrough(file, file->run, file->used, file->start);
    file->used = 0;
    return result;
}

static int isCommitFrameHeader(const void *data, int amount) {
    if (amount != FRAME_HEADER_BYTES) return 0;
    const unsigned char *bytes = data;
    return (bytes[4] | bytes[5] | bytes[6] | bytes[7]) != 0;
}

static int walWrite(sqlite3_file *handle, const void *data, int amount, sqlite3_int64 offset) {
    WALFile *file = (WALFile *) handle;
    if (!file->gathering) return writeThrough(file, data, amount, offset);
    int completesCommit = offset == file->commitPageAt;
    int commitHeader = isCommitFrameHeader(data, amount);
    file->commitPageAt = commitHeader ? offset + amount : -1;
    int continuesRun = file->used > 0 && offset == file->start + file->used && file->used + amount <= CAPACITY;
    if (!continuesRun) {
        int result = writeOut(file);
        if (result != SQLITE_OK) return result;
        // Nothing to join: a commit header or page goes straight out (a rewritten commit header has no page after
        // it), and anything else starts a run.
        if (completesCommit) file->gathering = 0;
        if (commitHeader || completesCommit || amount > CAPACITY) return writeThrough(file, data, amount, offset);
        if (!file->run && !(file->run = malloc(CAPACITY))) return writeThrough(file, data, amount, offset);
        file->start = offset;
    }
    memcpy(file->run + file->used, data, (size_t) amount);
    file->used += amount;
    if (!completesCommit) return SQLITE_OK;
    // The commit frame is complete: it and everything before it go out now, and whatever follows in this COMMIT
    // (padding frames) straight after.
    file->gathering = 0;
    return writeOut(file);
}

// Nothing is gathered at close: gathering happens only inside a COMMIT, and `endCommit` leaves the run empty.
static int walClose(sqlite3_file *handle) {
    WALFile *file = (WALFile *) handle;
    free(file->run);
    file->run = NULL;
    return file->real->pMethods->xClose(file->real);
}

// Every other operation writes the run out first, then is the unix VFS's own.
#define AFTER_WRITING_OUT(call)                       \
    WALFile *file = (WALFile *) handle;               \
    int written = writeOut(file);                     \
    if (written != SQLITE_OK) return written;         \
    sqlite3_file *real = file->real;                  \
    return real->pMethods->call

static int walRead(sqlite3_file *handle, void *data, int amount, sqlite3_int64 offset) {
    AFTER_WRITING_OUT(xRead(real, data, amount, offset));
}
static int walTruncate(sqlite3_file *handle, sqlite3_int64 size) { AFTER_WRITING_OUT(xTruncate(real, size)); }
static int walSync(sqlite3_file *handle, int flags) { AFTER_WRITING_OUT(xSync(real, flags)); }
static int walFileSize(sqlite3_file *handle, sqlite3_int64 *size) { AFTER_WRITING_OUT(xFileSize(real, size)); }
static int walLock(sqlite3_file *handle, int lock) { AFTER_WRITING_OUT(xLock(real, lock)); }
static int walUnlock(sqlite3_file *handle, int lock) { AFTER_WRITING_OUT(xUnlock(real, lock)); }
static int walCheckReservedLock(sqlite3_file *handle, int *held) { AFTER_WRITING_OUT(xCheckReservedLock(real, held)); }
static int walFileControl(sqlite3_file *handle, int op, void *argument) {
    AFTER_WRITING_OUT(xFileControl(real, op, argument));
}
static int walSectorSize(sqlite3_file *handle) {
    sqlite3_file *real = ((WALFile *) handle)->real;
    return real->pMethods->xSectorSize(real);
}
static int walDeviceCharacteristics(sqlite3_file *handle) {
    sqlite3_file *real = ((WALFile *) handle)->real;
    return real->pMethods->xDeviceCharacteristics(real);
}

static int vfsOpen(sqlite3_vfs *vfs, sqlite3_filename name, sqlite3_file *handle, int flags, int *outFlags) {
    sqlite3_vfs *unixVFS = vfs->pAppData;
    // Anything but a WAL file is the unix VFS's, opened into the same memory (szOsFile covers it).
    if (!(flags & SQLITE_OPEN_WAL)) return unixVFS->xOpen(unixVFS, name, handle, flags, outFlags);
    WALFile *file = (WALFile *) handle;
    memset(file, 0, sizeof *file);
    file->real = (sqlite3_file *) (file + 1);
    file->commitPageAt = -1;
    int result = unixVFS->xOpen(unixVFS, name, file->real, flags, outFlags);
    if (result != SQLITE_OK || !file->real->pMethods) {
        // SQLite calls xClose only on a file whose pMethods is set.
        if (file->real->pMethods) file->real->pMethods->xClose(file->real);
        return result != SQLITE_OK ? result : SQLITE_CANTOPEN;
    }
    file->base.pMethods = &walMethods;
    return SQLITE_OK;
}

/// The connection's WAL file when it is one of this VFS's, else NULL (not in WAL mode, or opened with another VFS).
static WALFile *walFileOf(sqlite3 *db) {
    sqlite3_file *journal = NULL;
    if (sqlite3_file_control(db, "main", SQLITE_FCNTL_JOURNAL_POINTER, &journal) != SQLITE_OK || !journal) return NULL;
    return journal->pMethods == &walMethods ? (WALFile *) journal : NULL;
}

void CSQLiteWALBuffer_beginCommit(sqlite3 *db) {
    WALFile *file = walFileOf(db);
    if (file) file->gathering = 1;
}

int CSQLiteWALBuffer_endCommit(sqlite3 *db, int committed) {
    WALFile *file = walFileOf(db);
    if (!file) return SQLITE_OK;
    file->gathering = 0;
    file->commitPageAt = -1;
    int leftOver = file->used > 0;
    file->used = 0;
    return committed && leftOver ? SQLITE_INTERNAL : SQLITE_OK;
}

// The rest of the VFS is the unix VFS's.
#define UNIX ((sqlite3_vfs *) vfs->pAppData)
static int vfsDelete(sqlite3_vfs *vfs, const char *name, int syncDirectory) {
    return UNIX->xDelete(UNIX, name, syncDirectory);
}
static int vfsAccess(sqlite3_vfs *vfs, const char *name, int flags, int *result) {
    return UNIX->xAccess(UNIX, name, flags, result);
}
static int vfsFullPathname(sqlite3_vfs *vfs, const char *name, int size, char *out) {
    return UNIX->xFullPathname(UNIX, name, size, out);
}
static void *vfsDlOpen(sqlite3_vfs *vfs, const char *name) { return UNIX->xDlOpen(UNIX, name); }
static void vfsDlError(sqlite3_vfs *vfs, int size, char *out) { UNIX->xDlError(UNIX, size, out); }
static void (*vfsDlSym(sqlite3_vfs *vfs, void *library, const char *symbol))(void) {
    return UNIX->xDlSym(UNIX, library, symbol);
}
static void vfsDlClose(sqlite3_vfs *vfs, void *library) { UNIX->xDlClose(UNIX, library); }
static int vfsRandomness(sqlite3_vfs *vfs, int size, char *out) { return UNIX->xRandomness(UNIX, size, out); }
static int vfsSleep(sqlite3_vfs *vfs, int microseconds) { return UNIX->xSleep(UNIX, microseconds); }
static int vfsCurrentTime(sqlite3_vfs *vfs, double *now) { return UNIX->xCurrentTime(UNIX, now); }
static int vfsGetLastError(sqlite3_vfs *vfs, int size, char *out) { return UNIX->xGetLastError(UNIX, size, out); }
static int vfsCurrentTimeInt64(sqlite3_vfs *vfs, sqlite3_int64 *now) { return UNIX->xCurrentTimeInt64(UNIX, now); }

int CSQLiteWALBuffer_register(void) {
    if (sqlite3_vfs_find(CSQLiteWALBuffer_name)) return SQLITE_OK;
    sqlite3_vfs *unixVFS = sqlite3_vfs_find(NULL);
    if (!unixVFS) return SQLITE_ERROR;
    // Version 1: a WAL file is never memory-mapped and has no shared memory of its own (both are the database
    // file's), so SQLite never asks for version 2 or 3's methods on it.
    walMethods = (sqlite3_io_methods) {
        .iVersion = 1, .xClose = walClose, .xRead = walRead, .xWrite = walWrite, .xTruncate = walTruncate,
        .xSync = walSync, .xFileSize = walFileSize, .xLock = walLock, .xUnlock = walUnlock,
        .xCheckReservedLock = walCheckReservedLock, .xFileControl = walFileControl, .xSectorSize = walSectorSize,
        .xDeviceCharacteristics = walDeviceCharacteristics,
    };
    walVFS = (sqlite3_vfs) {
        .iVersion = 2, .szOsFile = (int) sizeof(WALFile) + unixVFS->szOsFile, .mxPathname = unixVFS->mxPathname,
        .zName = CSQLiteWALBuffer_name, .pAppData = unixVFS, .xOpen = vfsOpen, .xDelete = vfsDelete,
        .xAccess = vfsAccess, .xFullPathname = vfsFullPathname, .xDlOpen = vfsDlOpen, .xDlError = vfsDlError,
        .xDlSym = vfsDlSym, .xDlClose = vfsDlClose, .xRandomness = vfsRandomness, .xSleep = vfsSleep,
        .xCurrentTime = vfsCurrentTime, .xGetLastError = vfsGetLastError, .xCurrentTimeInt64 = vfsCurrentTimeInt64,
    };
    return sqlite3_vfs_register(&walVFS, 0);
}
