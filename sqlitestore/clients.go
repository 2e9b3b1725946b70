package sqlitestore

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/syncgo/syncgo/store"
)

// Client returns a client record, with this process's deferred write of
// it applied.
func (s *Store) Client(ctx context.Context, partition, clientID string) (store.ClientRecord, error) {
	return s.clients.ReadClient(partition, func() (store.ClientRecord, error) {
		return s.readClient(ctx, partition, clientID)
	})
}

// readClient reads a client record from the database.
func (s *Store) readClient(ctx context.Context, partition, clientID string) (rec store.ClientRecord, err error) {
	err = s.read(ctx, func(c *conn) error {
		rec, err = clientOn(c, partition, clientID)
		return err
	})
	return rec, err
}

// clientOn reads a client record on c; ErrNotFound when absent.
func clientOn(c *conn, partition, clientID string) (store.ClientRecord, error) {
	rec := store.ClientRecord{ClientID: clientID}
	var cursor nullInt64
	var subs []byte
	err := c.queryRow(`SELECT actor_id, wire_version, cursor, subscriptions, updated_at_ms
FROM sync_clients WHERE partition=? AND client_id=?`, partition, clientID).
		Scan(&rec.ActorID, &rec.WireVersion, &cursor, &subs, &rec.UpdatedAtMs)
	if errors.Is(err, errNoRows) {
		return store.ClientRecord{}, store.ErrNotFound
	}
	if err != nil {
		return store.ClientRecord{}, fmt.Errorf("read client: %w", err)
	}
	rec.Cursor = -1
	if cursor.Valid {
		rec.Cursor = cursor.Int64
	}
	if rec.Subscriptions, err = store.DecodeSubscriptions(subs); err != nil {
		return store.ClientRecord{}, err
	}
	return rec, nil
}

// ReadRequestState reads the partition, its serve gate and the client
// record on one read connection (store.RequestStateReader), in one read
// transaction shared with the concurrent requests of the partition
// (entry_share.go).
func (s *Store) ReadRequestState(ctx context.Context, partition, clientID string, running int32) (store.RequestState, error) {
	if clientID != "" {
		return s.readSharedState(ctx, partition, clientID, running)
	}
	return s.readRequestState(ctx, partition, clientID, running)
}

// readRequestState is ReadRequestState's read of its own.
func (s *Store) readRequestState(ctx context.Context, partition, clientID string, running int32) (store.RequestState, error) {
	var st store.RequestState
	var rec store.ClientRecord
	found := false
	err := s.clients.Read(partition, &rec, func() error {
		return s.readTx(ctx, func(c *conn) error {
			var err error
			if st, err = partitionStateOn(c, partition, running); err != nil || clientID == "" {
				return err
			}
			rec, err = clientOn(c, partition, clientID)
			if errors.Is(err, store.ErrNotFound) {
				// No record: the overlay below finds no key either.
				rec.ClientID = clientID
				return nil
			}
			found = err == nil
			return err
		})
	})
	if err != nil {
		return store.RequestState{}, err
	}
	if found {
		st.Client = &rec
	}
	return st, nil
}

// partitionStateOn reads a partition's state and its serve gate at the
// running schema version on c: a request's entry, a window's end.
func partitionStateOn(c *conn, partition string, running int32) (store.RequestState, error) {
	var st store.RequestState
	var err error
	if st.Partition, err = scanPartition(c.queryRow(selectPartition, partition), partition); err != nil {
		return st, err
	}
	st.Gate, err = serveGateOn(c, partition, running)
	return st, err
}

// PutClient creates or replaces a client record.
func (s *Store) PutClient(ctx context.Context, partition string, rec store.ClientRecord) error {
	subs, err := store.EncodeSubscriptions(rec.Subscriptions)
	if err != nil {
		return fmt.Errorf("put client: %w", err)
	}
	// No cursor is -1, as the reference stores it: its sync_clients.cursor
	// is NOT NULL (0.15 to 0.20), so NULL would fail there.
	cursor := max(rec.Cursor, -1)
	return s.syncClient(ctx, partition, rec.ClientID, func(ctx context.Context, c *conn) error {
		n, err := c.execChanges(`INSERT INTO sync_clients(partition, client_id, actor_id, wire_version, cursor, subscriptions, updated_at_ms)
VALUES (?,?,?,?,?,?,?) ON CONFLICT(partition, client_id) DO UPDATE SET
  wire_version=excluded.wire_version, cursor=excluded.cursor, subscriptions=excluded.subscriptions,
  updated_at_ms=excluded.updated_at_ms WHERE sync_clients.actor_id = excluded.actor_id`,
			partition, rec.ClientID, rec.ActorID, int(rec.WireVersion), cursor, string(subs), rec.UpdatedAtMs)
		if err == nil && n == 0 {
			return store.ErrClientBound
		}
		return err
	})
}

// BindClient creates a client record unless one exists, and returns the
// stored record; both run on the write connection, so no other write
// comes between them.
func (s *Store) BindClient(ctx context.Context, partition string, rec store.ClientRecord) (store.ClientRecord, error) {
	subs, err := store.EncodeSubscriptions(rec.Subscriptions)
	if err != nil {
		return store.ClientRecord{}, fmt.Errorf("bind client: %w", err)
	}
	out := store.ClientRecord{ClientID: rec.ClientID}
	err = s.w.do(ctx, func(ctx context.Context, c *conn) error {
		if err := c.exec(`INSERT INTO sync_clients(partition, client_id, actor_id, wire_version, cursor, subscriptions, updated_at_ms)
VALUES (?,?,?,?,?,?,?) ON CONFLICT(partition, client_id) DO NOTHING`,
			partition, rec.ClientID, rec.ActorID, int(rec.WireVersion), max(rec.Cursor, -1), string(subs), rec.UpdatedAtMs); err != nil {
			return err
		}
		var cursor nullInt64
		var stored []byte
		if err := c.queryRow(`SELECT actor_id, wire_version, cursor, subscriptions, updated_at_ms
FROM sync_clients WHERE partition=? AND client_id=?`, partition, rec.ClientID).
			Scan(&out.ActorID, &out.WireVersion, &cursor, &stored, &out.UpdatedAtMs); err != nil {
			return err
		}
		out.Cursor = -1
		if cursor.Valid {
			out.Cursor = cursor.Int64
		}
		out.Subscriptions, err = store.DecodeSubscriptions(stored)
		return err
	})
	if err != nil {
		return store.ClientRecord{}, fmt.Errorf("bind client: %w", err)
	}
	return out, nil
}

// AdvanceClientCursor applies a realtime ack.
func (s *Store) AdvanceClientCursor(ctx context.Context, partition string, a store.CursorAdvance) (bool, error) {
	if s.clients == nil {
		return s.advanceClientCursor(ctx, partition, a)
	}
	return s.clients.Advance(partition, a.ClientID, a.Cursor, func() (bool, error) {
		return s.advanceClientCursor(ctx, partition, a)
	})
}

// sqlAdvanceCursor moves a client record's cursor forward for its own
// actor: cursor, at, partition, client, actor, cursor.
const sqlAdvanceCursor = `UPDATE sync_clients SET cursor = ?, updated_at_ms = max(updated_at_ms, ?)
WHERE partition=? AND client_id=? AND actor_id=? AND (cursor IS NULL OR cursor < ?)`

func (s *Store) advanceClientCursor(ctx context.Context, partition string, a store.CursorAdvance) (bool, error) {
	var updated bool
	err := s.w.do(ctx, func(ctx context.Context, c *conn) error {
		var epoch string
		err := c.queryRow("SELECT log_epoch FROM sync_partition_registry WHERE partition=?", partition).Scan(&epoch)
		if errors.Is(err, errNoRows) || (err == nil && epoch != a.LogEpoch) {
			return store.ErrEpochMismatch
		}
		if err != nil {
			return err
		}
		if ok, err := subscriptionsMatch(c, partition, a); err != nil || !ok {
			return err
		}
		n, err := c.execChanges(sqlAdvanceCursor,
			a.Cursor, a.AtMs, partition, a.ClientID, a.ActorID, a.Cursor)
		updated = n == 1
		return err
	})
	if err != nil {
		if errors.Is(err, store.ErrEpochMismatch) {
			return false, err
		}
		return false, fmt.Errorf("advance client cursor: %w", err)
	}
	return updated, nil
}

// subscriptionsMatch reports whether an advance that carries a digest of
// its socket's subscription list finds that list stored (on the writer,
// so nothing changes it before the update). An absent record matches:
// the update finds nothing.
func subscriptionsMatch(c *conn, partition string, a store.CursorAdvance) (bool, error) {
	if a.Subscriptions == 0 {
		return true, nil
	}
	var subs []byte
	err := c.queryRow(`SELECT subscriptions FROM sync_clients WHERE partition=? AND client_id=?`,
		partition, a.ClientID).Scan(&subs)
	if errors.Is(err, errNoRows) {
		return true, nil
	}
	if err != nil {
		return false, err
	}
	return store.StoredSubscriptionsMatch(a, subs, store.DecodeSubscriptions), nil
}

var _ store.CursorBatchAdvancer = (*Store)(nil)

// AdvanceClientCursors applies many acks of a partition in one write (one
// savepoint of the writer's batch transaction, the partition's epoch read
// once), each as advanceClientCursor applies one; an advance of another
// epoch is skipped.
func (s *Store) AdvanceClientCursors(ctx context.Context, partition string, advances []store.CursorAdvance) ([]bool, error) {
	run := func() ([]bool, error) {
		updated := make([]bool, len(advances))
		err := s.w.do(ctx, func(ctx context.Context, c *conn) error {
			clear(updated) // a retried write starts over
			var epoch string
			err := c.queryRow("SELECT log_epoch FROM sync_partition_registry WHERE partition=?", partition).Scan(&epoch)
			if errors.Is(err, errNoRows) {
				return nil
			}
			if err != nil {
				return err
			}
			for i, a := range advances {
				if a.LogEpoch != epoch {
					continue
				}
				if ok, err := subscriptionsMatch(c, partition, a); err != nil {
					return err
				} else if !ok {
					continue
				}
				n, err := c.execChanges(sqlAdvanceCursor,
					a.Cursor, a.AtMs, partition, a.ClientID, a.ActorID, a.Cursor)
				if err != nil {
					return err
				}
				updated[i] = n == 1
			}
			return nil
		})
		if err != nil {
			return nil, fmt.Errorf("advance client cursors: %w", err)
		}
		return updated, nil
	}
	if s.clients == nil {
		return run()
	}
	return s.clients.AdvanceMany(partition, advances, run)
}

// ActiveCursorFloor returns the lowest cursor among clients updated at or
// after sinceMs.
func (s *Store) ActiveCursorFloor(ctx context.Context, partition string, sinceMs int64) (int64, bool, error) {
	if s.closed.Load() {
		return 0, false, store.ErrClosed
	}
	if s.clients != nil {
		// The deferred records of this process count.
		if err := s.clients.Flush(ctx); err != nil {
			return 0, false, fmt.Errorf("active cursor floor: %w", err)
		}
	}
	var floor nullInt64
	err := s.read(ctx, func(c *conn) error {
		return c.queryRow(`SELECT MIN(cursor) FROM sync_clients
WHERE partition=? AND updated_at_ms >= ? AND cursor IS NOT NULL AND cursor >= 0`, partition, sinceMs).Scan(&floor)
	})
	if err != nil {
		return 0, false, fmt.Errorf("active cursor floor: %w", err)
	}
	return floor.Int64, floor.Valid, nil
}

// clientWriteBehind bounds how long a deferred client record waits:
// 250 ms, not the 25 of Postgres. Every write changes the WAL, and a read
// transaction that finds the WAL changed starts with an empty page cache:
// a catch-up's cursor, written every 25 ms, made its windows read cold
// (100,000 commits from a copied seed, 4 pairs each: 300-393 ms at 25 ms,
// 269-342 at 250 while the scan connections mapped the file; 298-305
// against 288-300 with their small page cache). One process serves a
// SQLite file, so no other process reads the older cursor meanwhile.
const clientWriteBehind = 250 * time.Millisecond

// syncClient runs fn as a writer job ordered with the deferred client
// records: the pending one of the client (of every client of the
// partition with clientID "") is dropped and no batch of them runs
// meanwhile.
func (s *Store) syncClient(ctx context.Context, partition, clientID string, fn writeFunc) error {
	if s.clients == nil {
		return s.w.do(ctx, fn)
	}
	return s.clients.Sync(partition, clientID, func() error { return s.w.do(ctx, fn) })
}

// DeferClient queues a cursor-only change of a client record
// (store.ClientDeferrer).
func (s *Store) DeferClient(_ context.Context, partition, logEpoch string, rec store.ClientRecord, baseCursor int64) error {
	if s.closed.Load() {
		return store.ErrClosed
	}
	if s.clients == nil {
		return ErrReadOnly
	}
	return s.clients.Defer(partition, logEpoch, rec, baseCursor)
}

// writeDeferredClients writes a batch of deferred client records in one
// writer job: each moves only a record that is still the one its request
// read, in a partition still in its epoch.
func (s *Store) writeDeferredClients(ctx context.Context, batch []store.DeferredClient) error {
	return s.w.do(ctx, func(ctx context.Context, c *conn) error {
		for _, d := range batch {
			if err := c.exec(`UPDATE sync_clients SET cursor = ?, updated_at_ms = max(updated_at_ms, ?)
WHERE partition=? AND client_id=? AND actor_id=? AND wire_version=? AND coalesce(cursor, -1) = ?
  AND EXISTS (SELECT 1 FROM sync_partition_registry r WHERE r.partition = sync_clients.partition AND r.log_epoch = ?)`,
				d.Cursor, d.UpdatedAtMs, d.Partition, d.ClientID, d.ActorID, int(d.WireVersion), d.BaseCursor, d.LogEpoch); err != nil {
				return fmt.Errorf("write deferred client records: %w", err)
			}
		}
		return nil
	})
}
