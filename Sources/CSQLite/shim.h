#ifndef CSQLITE_SHIM_H
#define CSQLITE_SHIM_H
#include <sqlite3.h>

/// SQLITE_TRANSIENT is a macro casting -1 to a function pointer, which Swift cannot import.
/// It tells SQLite to copy a bound value before the bind call returns.
/// https://www.sqlite.org/c3ref/c_static.html — delete when Swift imports such casts.
static inline sqlite3_destructor_type CSQLite_transient(void) { return SQLITE_TRANSIENT; }

/// The extended result codes are macros built with `|` and `<<` (e.g. `SQLITE_CONSTRAINT | (10<<8)`), which Swift
/// does not import either. https://www.sqlite.org/rescode.html#extrc
static const int CSQLite_CONSTRAINT_PRIMARYKEY = SQLITE_CONSTRAINT_PRIMARYKEY;
static const int CSQLite_CONSTRAINT_UNIQUE = SQLITE_CONSTRAINT_UNIQUE;

/// sqlite3_config is variadic, which Swift cannot call. Turning off memory statistics removes a process-wide mutex
/// SQLite otherwise takes on every allocation; the relay never reads them (sqlite3_memory_used).
/// Must run before SQLite initializes (the first open), or it returns SQLITE_MISUSE.
/// https://www.sqlite.org/c3ref/c_config_covering_index_scan.html#sqliteconfigmemstatus
static inline int CSQLite_disableMemoryStatistics(void) { return sqlite3_config(SQLITE_CONFIG_MEMSTATUS, 0); }

/// sqlite3_db_config is variadic too. Turns the connection's triggers off (on = 0) or on; a change expires the
/// connection's prepared statements, so it is set once, right after the connection's migrations.
/// https://www.sqlite.org/c3ref/c_dbconfig_defensive.html#sqlitedbconfigenabletrigger
static inline int CSQLite_setTriggersEnabled(sqlite3 *db, int on) {
    on = on != 0;  /* a negative value would only ask */
    int now = -1;
    int code = sqlite3_db_config(db, SQLITE_DBCONFIG_ENABLE_TRIGGER, on, &now);
    return code == SQLITE_OK && now != on ? SQLITE_ERROR : code;
}

#endif
