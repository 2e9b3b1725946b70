// Package pgstore is the Postgres storage driver of the sync server: an
// implementation of [store.Store] over a pgx connection pool.
//
// # Tables
//
// The driver shares its tables with the reference server (0.24): the core
// sync_* tables are created by the embedded migrations (migrations/*.sql) at
// [Open], the app tables by [Store.EnsureSchema]. Every name is unqualified
// and resolves through the session's search_path, so a database schema per
// deployment (or per test) works by setting search_path on the connections.
// COMPAT.md lists where the driver differs from the reference server.
//
// [Open] reads the catalog first (core.go, one statement that takes no
// lock) and runs no DDL at all when every core table, column, index, the
// fence function and its trigger are there, so starting a process next to
// running writers costs nothing and blocks nobody. Otherwise it runs only
// the missing objects' statements, under the migration locks below.
// [Store.EnsureSchemaWith] decides from one read-only snapshot (inspect.go)
// and writes nothing unless it creates or migrates. [Store.PlanSchema]
// reports that decision; [Store.Upgrade] brings a database of the
// reference 0.15 to 0.20 line to what this build needs (columns and
// indexes, no data rewritten), which EnsureSchemaWith refuses to do on its
// own. Config.ReadOnly opens a store that writes nothing.
//
// # Lock order
//
// Every transaction that runs DDL (core tables at Open, a schema bump,
// Upgrade) takes its locks in this order (lock.go):
//
//  1. the migration lock, pg_advisory_xact_lock on 'syncgo.migrate:' ||
//     current_schema(), waited for without a timeout (nothing is held yet);
//  2. SET LOCAL lock_timeout (500 ms) for every later lock;
//  3. sync_partitions, LOCK TABLE … IN EXCLUSIVE MODE: it waits for the
//     writers inside and holds new ones at their first statement;
//  4. the core tables in the order of migrations/*.sql (sync_partitions,
//     sync_partition_registry, sync_row_scopes, sync_commits, sync_changes,
//     sync_change_scopes, sync_push_results, sync_clients, sync_tombstones,
//     sync_schema_meta, sync_backfill_checkpoints, sync_writer_fence, then
//     the function and the trigger on sync_commits);
//  5. the app tables in the schema's order (DDL, then rows), then
//     sync_changes (rewritten payloads), sync_schema_meta (the marker),
//     sync_backfill_checkpoints and sync_writer_fence.
//
// A write transaction takes its sync_partitions row first, then, in the
// engine's order, the serve gate's tables (sync_schema_meta,
// sync_partition_registry, sync_backfill_checkpoints; read only), the app
// tables and sync_row_scopes, sync_push_results and the log (sync_commits,
// whose trigger reads sync_writer_fence, sync_changes, sync_change_scopes,
// sync_tombstones). A push that references blobs also takes, before it
// checks that they exist, a shared advisory lock per blob ('syncgo.blob:'
// || partition || '/' || id), which the blob sweep tries exclusively
// around its reference check and delete, holding nothing else (blobs.go).
// Step 3 keeps the two from interleaving. A lock wait of a migration that
// times out, or a deadlock Postgres breaks (SQLSTATE 55P03, 40P01), rolls
// the migration back and retries it with jittered backoff: the migration
// gives way, never a writer or a reader.
//
// # Writes
//
// [Store.Write] groups commits (group.go): the Write calls of one partition
// queue, and a leader goroutine (started by the first call that finds
// none, gone when the queue is empty) takes up to Config.MaxBatch of them
// into one database transaction on one pooled connection, runs their
// functions one after another, each in the savepoint syncgo_commit when
// the batch carries several, and commits once. A function that fails
// (or panics, or whose caller gave up before its turn) rolls back to its
// savepoint and gets its own error; the others commit. Every call waits
// for its answer, which is nil only once the COMMIT succeeded. Batches of
// different partitions run on different connections at the same time.
//
// The transaction's first statements insert the partition's
// sync_partitions row if it is absent and lock it (INSERT … ON CONFLICT
// DO UPDATE … RETURNING max_commit_seq), once per batch: that lock is the
// partition's write boundary (writers of other processes, and the
// reference server's, wait for it; a schema migration, LOCK TABLE
// sync_partitions IN EXCLUSIVE MODE, excludes them all). An append takes
// the next sequence from the one the lock read, counted in the batch (a
// rolled-back savepoint gives its sequences back), and the batch writes
// max_commit_seq back once, before COMMIT: the sequence is dense.
//
// Round trips. A statement that needs no answer (BEGIN, the lock,
// savepoints, row upserts of tables without a declared unique index,
// deletes, tombstones, the append, a push result known to be new) is
// deferred and sent with the next statement that has one, in one
// pipelined batch. A commit's writes thus travel with the next commit's
// first round trip, or with the COMMIT; one that fails there is that
// commit's failure (a late failure, batch.send): its savepoint is rolled
// back, it gets the error, and so does every later commit of the batch
// that appended (their sequences followed its); the rest is sent again.
// [Store.WriteReadAhead] (the engine's push) names what a function reads
// first: the batch reads all of it (push results, rows and tombstones,
// one statement per kind and table) with the serve gate in the round
// trip of BEGIN and the lock, and a call is answered from there until a
// write of the batch to the same key. A batch of pushes thus costs two
// round trips, one fsync and one row lock, whatever its size. An upsert
// and its scope index entries are one statement, and so are an append
// (commit row, changes, their scope index, tombstones) and the push
// result recorded after it. ROLLBACK TO SAVEPOINT is sent at once,
// since pgx prepares a batch's new statements first, which an aborted
// transaction refuses.
//
// The serve gate is read once per batch, after the lock: a schema bump
// waits for the batch's lock, and the writer fence is enforced by the
// database at each append (the sync_commits trigger), whatever the gate
// said.
//
// # Migration barrier
//
// The Store is a [store.Barrier] and its write transactions are
// [store.BarrierTx] (barrier.go): backfill checkpoints, the per-partition
// writer fence that the sync_commits_writer_fence trigger enforces inside
// the database (an older server's append fails with
// sync.storage.writer_fence_rejected without any cooperation from its
// code), and the serve gate, read in one statement. A schema bump
// ([Store.EnsureSchemaWith]) locks sync_partitions first, so it waits for
// the writers inside and blocks new ones at their first statement; in the
// same transaction it migrates the app tables (rows and logged changes of
// the tables that grew), writes the marker, installs the caller's
// checkpoint declarations and raises every partition's fence to the new
// version. A writer that waited then fails on the fence when it runs the
// older schema.
//
// # JSON columns
//
// The JSONB columns (scopes, subscriptions, push results) are read in
// both forms the reference server writes: a JSON document, or a JSONB
// string holding the document's text (its Bun client binds JSON text as
// a string); the scans' SQL filter on _sync_scopes reads both (json.go).
//
// # Commit notifications
//
// Several server processes can share one database. Every batch that
// appended announces its newest sequence with pg_notify on the channel
// syncgo_commits, right after its COMMIT in the same pipelined round trip
// (sqlNotifyCommit), as a transaction of its own that notifies only if
// that sequence is committed: a receiver reads the partition's commits up
// to it, so one notification covers the batch, and the batches of a
// partition announce in commit order. It is not in the batch's
// transaction because Postgres holds a database-wide lock from the commit
// of a transaction that notifies until its commit record is flushed,
// which would serialize the commits of all partitions. When the
// notification fails after the COMMIT succeeded (the writer's connection
// lost in between), it is sent again on connections of the pool, a few
// times within seconds, by a background worker of the store that the
// Write does not wait for (renotifier). A process that dies between the COMMIT
// and the notification (both already sent) leaves the batch to be
// announced by the partition's next one.
// [Store.ListenCommits] (the [store.CommitListener] the
// server uses for realtime fan-out) receives them on a dedicated
// connection, outside the pool, which therefore may go through a
// transaction pooler as long as Config.ListenURL does not; it reconnects
// with backoff and reports every (re)connect so that the receiver catches
// up on commits it may have missed. listen.go documents the payload.
//
// # Reads
//
// Scope-filtered reads start from the inverted scope indexes
// (sync_change_scopes for the log, sync_row_scopes for current rows) on the
// first effective scope key, one index range per value, and check every
// key. Row scans page by row id in bytewise order (COLLATE "C").
package pgstore
