package sqlitestore

import (
	"context"
	"errors"

	"github.com/syncgo/syncgo/internal/shareread"
	"github.com/syncgo/syncgo/store"
)

// Shared request entries, as on Postgres (pgstore/entry_share.go): the
// requests of one partition that arrive while a request state read of it
// is in flight (ReadRequestState: its partition, serve gate and client
// record) queue; when it ends, one read transaction reads the partition
// and the serve gate once and every queued client's record, and answers
// all of them. After a commit every read transaction starts with an empty
// page cache and reads each B-tree it touches again: one for the queue
// instead of one per request.
//
// Each queued request gets what a read of its own would give: the shared
// read starts after every request it answers was queued, its statements
// are a read of its own's, and every record read has this process's
// deferred write of it applied with no write-behind batch running in
// between (store.ClientWriteBehind.Read).

// entryShares are the request state reads queued or in flight, by
// partition and running schema version: each asks for a client's record,
// or for none (a state after a window, recent.go).
type entryShares = shareread.Reads[string, store.RequestState]

// readSharedState answers ReadRequestState for a client (none: the
// partition and gate alone), alone when no read of its partition is in
// flight, else with the next shared read.
func (s *Store) readSharedState(ctx context.Context, partition, clientID string, running int32) (store.RequestState, error) {
	return s.entries.AskBatched(ctx, s.sharedReadContext, store.EntryShareKey(partition, running), clientID,
		func(ctx context.Context, id string) (store.RequestState, error) {
			return s.readRequestState(ctx, partition, id, running)
		}, func(ctx context.Context, ids []string) ([]store.RequestState, error) {
			return s.readRequestStates(ctx, partition, ids, running)
		}, &s.sharedEntries)
}

// readRequestStates reads the partition, its serve gate and the records
// of the clients ids in one read transaction; the answers are in the
// order of ids, each with a record of its own (two asks of one client get
// equal records, decoded apart).
func (s *Store) readRequestStates(ctx context.Context, partition string, ids []string, running int32) ([]store.RequestState, error) {
	out := make([]store.RequestState, len(ids))
	read := func() error {
		return s.readTx(ctx, func(c *conn) error {
			st, err := partitionStateOn(c, partition, running)
			if err != nil {
				return err
			}
			for i, id := range ids {
				out[i] = st
				if id == "" {
					continue // a state after a window: no client
				}
				rec, err := clientOn(c, partition, id)
				if errors.Is(err, store.ErrNotFound) {
					continue
				}
				if err != nil {
					return err
				}
				if s.clients != nil {
					s.clients.Overlay(partition, &rec)
				}
				out[i].Client = &rec
			}
			return nil
		})
	}
	var err error
	if s.clients != nil {
		// The records' overlays are applied inside read, under the
		// write-behind's read lock (no batch runs between the database
		// read and them); none is Read's own record, which no row fills.
		var none store.ClientRecord
		err = s.clients.Read(partition, &none, read)
	} else {
		err = read()
	}
	if err != nil {
		return nil, err
	}
	return out, nil
}
