// Package store is the storage contract of the sync server: the interfaces
// that a storage driver implements, their parameter and result types, and
// the sentinel errors that drivers translate their own errors into.
//
// Everything the protocol stores goes through this contract: partitions and
// their log epochs, the commit log with its dense per-partition sequence,
// the current rows with their versions and scope index, delete tombstones,
// the push-result journal, client records, the schema marker, and the
// tables of the migration barrier.
//
// Two drivers implement it, sqlitestore and pgstore; store/storetest is the
// suite both must pass. The contract has no SQL in it.
//
// # Writes
//
// Every write that belongs to a partition runs inside [Store.Write], under
// the partition's write boundary: one writer at a time per partition
// (SQLite: the single writer connection and BEGIN IMMEDIATE; Postgres: the
// lock on the partition's sync_partitions row). The function passed to
// Write sees its own writes and nothing of concurrent writers to the same
// partition; when Write returns nil its writes are durable.
package store
