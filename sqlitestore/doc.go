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
// beside the writer.
//
// The writer is also the partition write boundary of the migration barrier
// (store.Barrier): a schema bump (EnsureSchemaWith against an older marker)
// runs as one writer function, so no append interleaves with its DDL, its
// payload rewrite, the new marker, the declared checkpoints and the writer
// fences it raises; checkpoint activation is one writer function too. The
// fence itself is a trigger on sync_commits (migrations/001_core.sql), so
// an older build's appends are rejected by the database.
package sqlitestore
