// Package syncgo is a Go server for the Syncular sync protocol (SSP2):
// local-first clients keep an SQLite database, push their writes to a
// server-owned commit log, and pull commits or bootstrap segments back,
// with deltas and wake-ups over a WebSocket.
//
// A Server is built with New from a Config: a storage driver (package
// sqlitestore, embedded; package pgstore, Postgres, several processes on
// one database), a compiled schema (package schema), the host's
// authentication (Config.Authenticate: a request's actor and partition)
// and scope resolution (Config.ResolveScopes: what each actor may read and
// write). Start runs the readiness gate (schema, migration, declared
// backfill checkpoints); Handler serves the protocol's routes (POST /sync,
// GET /segments/{id}, GET /realtime) under whatever prefix the host mounts
// it; Stop ends it. See Example for a complete embedding.
//
// Collaborative crdt columns (§5.10) are merged on push by the merger of
// their crdtType (Config.CRDTMergers; the yjs-doc merger of package
// crdt/yjs is built in).
//
// The server speaks wire version 3 and wire versions 1 and 2 (clients of
// the 0.15 to 0.20 line). Its byte layer is package wire, its error
// catalog package syncerr, the storage contract package store.
//
// The syncgo command (cmd/syncgo) runs the same server as a standalone
// binary, with operator commands for the migration barrier; see the
// README and docs/.
package syncgo

import "github.com/syncgo/syncgo/wire"

// ProtocolContentType is the content type of SSP2 request and response
// bodies (§1.1).
const ProtocolContentType = wire.ContentType
