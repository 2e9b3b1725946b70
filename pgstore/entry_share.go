package pgstore

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/syncgo/syncgo/internal/shareread"
	"github.com/syncgo/syncgo/store"
)

// Shared request entries: the requests of one partition that arrive while
// a request state read of it is in flight (ReadRequestState: its
// partition, serve gate and client record) queue; when it ends, one round
// trip reads the partition, the serve gate and every queued client's
// record (one statement for all of them) and answers all of them.
//
// Each queued request gets what a read of its own would give: the shared
// read is sent after every request it answers was queued, its three
// statements are those of a read of its own but for the client records'
// key list, and every record read has this process's deferred write of it
// applied with no write-behind batch running in between
// (store.ClientWriteBehind.Read).

// sqlClients is sqlClient for a list of clients ($2).
const sqlClients = `SELECT client_id, actor_id, wire_version, cursor, subscriptions, updated_at_ms
  FROM sync_clients WHERE partition = $1 AND client_id = ANY($2::text[])`

// entryShares are the request state reads queued or in flight, by
// partition and running schema version: each asks for a client's record.
type entryShares = shareread.Reads[string, store.RequestState]

// readSharedState answers ReadRequestState for a client, alone when no
// read of its partition is in flight, else with the next shared read.
func (s *Store) readSharedState(ctx context.Context, partition, clientID string, running int32) (store.RequestState, error) {
	return s.entries.AskBatched(ctx, s.sharedReadContext, store.EntryShareKey(partition, running), clientID,
		func(ctx context.Context, id string) (store.RequestState, error) {
			return s.readRequestState(ctx, partition, id, running)
		}, func(ctx context.Context, ids []string) ([]store.RequestState, error) {
			return s.readRequestStates(ctx, partition, ids, running)
		}, &s.sharedEntries)
}

// readRequestStates reads the partition, its serve gate and the records
// of the clients ids in one round trip; the answers are in the order of
// ids, each with a record of its own (two asks of one client get equal
// records, decoded apart).
func (s *Store) readRequestStates(ctx context.Context, partition string, ids []string, running int32) ([]store.RequestState, error) {
	out := make([]store.RequestState, len(ids))
	read := func() error {
		b := &pgx.Batch{}
		queuePartitionState(b, partition, running)
		b.Queue(sqlClients, partition, ids)
		br := s.pool.SendBatch(ctx, b)
		err := func() error {
			st, err := readPartitionState(br, partition)
			if err != nil {
				return err
			}
			rows, err := br.Query()
			if err != nil {
				return err
			}
			raw := map[string]clientRow{}
			for rows.Next() {
				var r clientRow
				if err := rows.Scan(&r.id, &r.actor, &r.wireVersion, &r.cursor, &r.subs, &r.updatedAt); err != nil {
					return fmt.Errorf("client: %w", err)
				}
				raw[r.id] = r
			}
			if err := rows.Err(); err != nil {
				return err
			}
			for i, id := range ids {
				out[i] = st
				r, ok := raw[id]
				if !ok {
					continue
				}
				rec := store.ClientRecord{ClientID: r.id, ActorID: r.actor, WireVersion: uint16(r.wireVersion),
					Cursor: r.cursor, UpdatedAtMs: r.updatedAt}
				if rec.Subscriptions, err = decodeSubscriptions(r.subs); err != nil {
					return fmt.Errorf("client: %w", err)
				}
				if s.clients != nil {
					s.clients.Overlay(partition, &rec)
				}
				out[i].Client = &rec
			}
			return nil
		}()
		return errors.Join(err, br.Close())
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

// clientRow is a sqlClients row.
type clientRow struct {
	id, actor         string
	wireVersion       int32
	cursor, updatedAt int64
	subs              []byte
}
