// Package sqlitestore is the SQLite storage driver of the sync server, the
// embedded default. It implements store.Store on one database file in WAL
// mode, durable at acknowledgement (synchronous=FULL).
//
// SQLite has one writer at a time, so every write goes through one writer
// goroutine that owns the write connection. It takes the writes that are
// waiting when it becomes free and runs them in one transaction, each inside
// its own savepoint, then commits once: concurrent commits share one fsync
// (group commit), and each is acknowledged only after that commit. A write
// that fails rolls back to its savepoint without disturbing the others.
// Reads use a separate pool of read-only connections, which WAL lets run
// beside the writer. Within a batch the writer reads each partition's
// commit sequence and serve gate once (batchcache.go): the batch holds the
// write lock, so only its own statements could change them, and any
// statement other than a push's first writes the numbers back and forgets
// what it read.
//
// The writer is also the partition write boundary of the migration barrier
// (store.Barrier): a schema bump (EnsureSchemaWith against an older marker)
// runs as one writer function, so no append interleaves with its DDL, its
// payload rewrite, the new marker, the declared checkpoints and the writer
// fences it raises; checkpoint activation is one writer function too. The
// fence itself is a trigger on sync_commits (migrations/001_core.sql), so
// an older build's appends are rejected by the database.
//
// Opening a database plans its core tables first (core.go), reading the
// catalog: a database at the layout gets no DDL and no write lock; one
// another server created (the reference's, whose sync_commits may lack
// writer_version) has its missing tables and columns added, before the
// indexes and the trigger that read them, in one transaction, or is
// refused untouched. Older app tables (the reference 0.15 to 0.20 line,
// without _sync_column_versions) are refused at their schema version
// until Upgrade (store.Upgrader) adds what is missing; PlanSchema
// (store.Inspector) tells, reading only, what EnsureSchemaWith would do.
// Config.ReadOnly opens the file read-only, for inspection beside a
// running server.
package sqlitestore
