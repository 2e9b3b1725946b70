package pgstore

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/syncgo/syncgo/store"
)

// Client returns a client record, with this process's deferred write of
// it applied.
func (s *Store) Client(ctx context.Context, partition, clientID string) (store.ClientRecord, error) {
	return retry(s, ctx, "Client", func() (store.ClientRecord, error) { return s.clientOnce(ctx, partition, clientID) })
}

// clientOnce is Client, once (see "Lost connections", retry.go).
func (s *Store) clientOnce(ctx context.Context, partition, clientID string) (store.ClientRecord, error) {
	return s.clients.ReadClient(partition, func() (store.ClientRecord, error) {
		return s.readClient(ctx, partition, clientID)
	})
}

// readClient reads a client record from the database.
func (s *Store) readClient(ctx context.Context, partition, clientID string) (store.ClientRecord, error) {
	if err := s.check(); err != nil {
		return store.ClientRecord{}, err
	}
	return scanClient(s.pool.QueryRow(ctx, sqlClient, partition, clientID), clientID)
}

// scanClient reads a client record from a sqlClient row; ErrNotFound when
// absent.
func scanClient(row pgx.Row, clientID string) (store.ClientRecord, error) {
	rec := store.ClientRecord{ClientID: clientID}
	var (
		wireVersion int32
		subs        []byte
	)
	err := row.Scan(&rec.ActorID, &wireVersion, &rec.Cursor, &subs, &rec.UpdatedAtMs)
	if errors.Is(err, pgx.ErrNoRows) {
		return store.ClientRecord{}, store.ErrNotFound
	}
	if err != nil {
		return store.ClientRecord{}, fmt.Errorf("client: %w", err)
	}
	rec.WireVersion = uint16(wireVersion)
	if rec.Subscriptions, err = decodeSubscriptions(subs); err != nil {
		return store.ClientRecord{}, fmt.Errorf("client: %w", err)
	}
	return rec, nil
}

// ReadRequestState reads the partition, its serve gate and the client
// record in one round trip: three statements in one pipelined batch
// (store.RequestStateReader), shared with the concurrent requests of the
// partition (entry_share.go).
func (s *Store) ReadRequestState(ctx context.Context, partition, clientID string, running int32) (store.RequestState, error) {
	return retry(s, ctx, "ReadRequestState", func() (store.RequestState, error) { return s.readRequestStateOnce(ctx, partition, clientID, running) })
}

// readRequestStateOnce is ReadRequestState, once (see "Lost connections", retry.go).
func (s *Store) readRequestStateOnce(ctx context.Context, partition, clientID string, running int32) (store.RequestState, error) {
	if err := s.check(); err != nil {
		return store.RequestState{}, err
	}
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
		b := &pgx.Batch{}
		queuePartitionState(b, partition, running)
		if clientID != "" {
			b.Queue(sqlClient, partition, clientID)
		}
		br := s.pool.SendBatch(ctx, b)
		err := func() error {
			var err error
			if st, err = readPartitionState(br, partition); err != nil || clientID == "" {
				return err
			}
			rec, err = scanClient(br.QueryRow(), clientID)
			if errors.Is(err, store.ErrNotFound) {
				rec.ClientID = clientID
				return nil
			}
			found = err == nil
			return err
		}()
		return errors.Join(err, br.Close())
	})
	if err != nil {
		return store.RequestState{}, err
	}
	if found {
		st.Client = &rec
	}
	return st, nil
}

// queuePartitionState queues the reads of a partition's state and its
// serve gate at the running schema version (readPartitionState reads
// their results): a request's entry, a window's end.
func queuePartitionState(b *pgx.Batch, partition string, running int32) {
	b.Queue(sqlPartition, partition)
	b.Queue(sqlServeGate, partition, running)
}

// readPartitionState reads the results of queuePartitionState.
func readPartitionState(br pgx.BatchResults, partition string) (store.RequestState, error) {
	var st store.RequestState
	var err error
	if st.Partition, err = scanPartitionRow(br.QueryRow(), partition); err != nil {
		return st, err
	}
	st.Gate, err = readServeGate(br.QueryRow())
	return st, err
}

// PutClient creates or replaces a client record.
func (s *Store) PutClient(ctx context.Context, partition string, rec store.ClientRecord) error {
	if err := s.checkWrite(); err != nil {
		return err
	}
	subs, err := store.EncodeSubscriptions(rec.Subscriptions)
	if err != nil {
		return fmt.Errorf("put client: %w", err)
	}
	return s.syncClient(partition, rec.ClientID, func() error {
		return s.retryingWrite(ctx, "PutClient", func() error { return s.putClient(ctx, partition, rec, subs) })
	})
}

// putClient runs PutClient's statement, once.
func (s *Store) putClient(ctx context.Context, partition string, rec store.ClientRecord, subs []byte) error {
	tag, err := s.pool.Exec(ctx, sqlPutClient, partition, rec.ClientID, rec.ActorID, int32(rec.WireVersion),
		rec.Cursor, subs, rec.UpdatedAtMs)
	if err != nil {
		return fmt.Errorf("put client: %w", storageFull(err))
	}
	if tag.RowsAffected() == 0 {
		return store.ErrClientBound
	}
	return nil
}

// clientWriteBehind bounds how long a deferred client record waits.
const clientWriteBehind = 25 * time.Millisecond

// syncClient runs a synchronous write of a client record (every record of
// the partition with clientID ""), ordered with the deferred ones.
func (s *Store) syncClient(partition, clientID string, fn func() error) error {
	if s.clients == nil {
		return fn()
	}
	return s.clients.Sync(partition, clientID, fn)
}

// DeferClient queues a cursor-only change of a client record
// (store.ClientDeferrer); a read-only store refuses it as PutClient does.
func (s *Store) DeferClient(_ context.Context, partition, logEpoch string, rec store.ClientRecord, baseCursor int64) error {
	if err := s.checkWrite(); err != nil {
		return err
	}
	return s.clients.Defer(partition, logEpoch, rec, baseCursor)
}

// writeDeferredClients writes a batch of deferred client records in one
// statement (its own implicit transaction): each moves only a record that
// is still the one its request read, in a partition still in its epoch.
func (s *Store) writeDeferredClients(ctx context.Context, batch []store.DeferredClient) error {
	n := len(batch)
	parts, ids, actors, epochs := make([]string, n), make([]string, n), make([]string, n), make([]string, n)
	wires := make([]int32, n)
	bases, cursors, ats := make([]int64, n), make([]int64, n), make([]int64, n)
	for i, d := range batch {
		parts[i], ids[i], actors[i], epochs[i] = d.Partition, d.ClientID, d.ActorID, d.LogEpoch
		wires[i], bases[i], cursors[i], ats[i] = int32(d.WireVersion), d.BaseCursor, d.Cursor, d.UpdatedAtMs
	}
	if _, err := s.pool.Exec(ctx, sqlWriteDeferredClients, parts, ids, actors, wires, epochs, bases, cursors, ats); err != nil {
		return fmt.Errorf("write deferred client records: %w", storageFull(err))
	}
	return nil
}

// BindClient creates a client record unless one exists, and returns the
// stored record.
func (s *Store) BindClient(ctx context.Context, partition string, rec store.ClientRecord) (store.ClientRecord, error) {
	return retryWrite(s, ctx, "BindClient", func() (store.ClientRecord, error) { return s.bindClientOnce(ctx, partition, rec) })
}

// bindClientOnce is BindClient, once (see "Lost connections", retry.go).
func (s *Store) bindClientOnce(ctx context.Context, partition string, rec store.ClientRecord) (store.ClientRecord, error) {
	if err := s.checkWrite(); err != nil {
		return store.ClientRecord{}, err
	}
	subs, err := store.EncodeSubscriptions(rec.Subscriptions)
	if err != nil {
		return store.ClientRecord{}, fmt.Errorf("bind client: %w", err)
	}
	tag, err := s.pool.Exec(ctx, sqlBindClient, partition, rec.ClientID, rec.ActorID, int32(rec.WireVersion),
		max(rec.Cursor, -1), subs, rec.UpdatedAtMs)
	if err != nil {
		return store.ClientRecord{}, fmt.Errorf("bind client: %w", storageFull(err))
	}
	if tag.RowsAffected() == 1 {
		return rec, nil
	}
	got, err := s.Client(ctx, partition, rec.ClientID)
	if err != nil {
		return store.ClientRecord{}, fmt.Errorf("bind client: %w", err)
	}
	return got, nil
}

// AdvanceClientCursor applies a realtime ack in one statement.
func (s *Store) AdvanceClientCursor(ctx context.Context, partition string, a store.CursorAdvance) (bool, error) {
	return retryWrite(s, ctx, "AdvanceClientCursor", func() (bool, error) { return s.advanceClientCursorOnce(ctx, partition, a) })
}

// advanceClientCursorOnce is AdvanceClientCursor, once (see "Lost connections", retry.go).
func (s *Store) advanceClientCursorOnce(ctx context.Context, partition string, a store.CursorAdvance) (bool, error) {
	if err := s.checkWrite(); err != nil {
		return false, err
	}
	advance := func() (bool, error) {
		subs, ok, err := s.checkedSubscriptions(ctx, partition, []store.CursorAdvance{a})
		if err != nil {
			return false, fmt.Errorf("advance client cursor: %w", err)
		}
		if !ok[0] {
			return false, nil
		}
		var (
			epochOK bool
			updated int64
		)
		err = s.pool.QueryRow(ctx, sqlAdvanceCursor, partition, a.ClientID, a.ActorID, a.Cursor, a.AtMs, a.LogEpoch, subs[0]).
			Scan(&epochOK, &updated)
		if err != nil {
			return false, fmt.Errorf("advance client cursor: %w", storageFull(err))
		}
		if !epochOK {
			return false, store.ErrEpochMismatch
		}
		return updated > 0, nil
	}
	if s.clients == nil {
		return advance()
	}
	return s.clients.Advance(partition, a.ClientID, a.Cursor, advance)
}

var _ store.CursorBatchAdvancer = (*Store)(nil)

// AdvanceClientCursors applies many acks of a partition in one statement
// (sqlAdvanceCursors), each as AdvanceClientCursor applies one; an ack of
// another epoch is skipped. Of several acks of one client the highest is
// sent (the others report false), and the acks go in client order, so
// that two instances' batches lock the records they share in one order.
func (s *Store) AdvanceClientCursors(ctx context.Context, partition string, advances []store.CursorAdvance) ([]bool, error) {
	return retryWrite(s, ctx, "AdvanceClientCursors", func() ([]bool, error) { return s.advanceClientCursorsOnce(ctx, partition, advances) })
}

// advanceClientCursorsOnce is AdvanceClientCursors, once (see "Lost connections", retry.go).
func (s *Store) advanceClientCursorsOnce(ctx context.Context, partition string, advances []store.CursorAdvance) ([]bool, error) {
	if err := s.checkWrite(); err != nil {
		return nil, err
	}
	run := func() ([]bool, error) {
		subs, ok, err := s.checkedSubscriptions(ctx, partition, advances)
		if err != nil {
			return nil, fmt.Errorf("advance client cursors: %w", err)
		}
		// Client order, a client's highest ack first; only that one is
		// sent. Acks whose socket's subscriptions are not stored are not.
		order := make([]int, 0, len(advances))
		for i := range advances {
			if ok[i] {
				order = append(order, i)
			}
		}
		slices.SortFunc(order, func(x, y int) int {
			ax, ay := advances[x], advances[y]
			return cmp.Or(strings.Compare(ax.ClientID, ay.ClientID), strings.Compare(ax.ActorID, ay.ActorID),
				cmp.Compare(ay.Cursor, ax.Cursor))
		})
		order = slices.CompactFunc(order, func(x, y int) bool {
			return advances[x].ClientID == advances[y].ClientID && advances[x].ActorID == advances[y].ActorID
		})
		n := len(order)
		clients, actors, epochs := make([]string, n), make([]string, n), make([]string, n)
		cursors, ats, idx := make([]int64, n), make([]int64, n), make([]int32, n)
		checked := make([]*string, n)
		for k, i := range order {
			a := advances[i]
			clients[k], actors[k], epochs[k], cursors[k], ats[k], idx[k] = a.ClientID, a.ActorID, a.LogEpoch, a.Cursor, a.AtMs, int32(i)
			checked[k] = subs[i]
		}
		updated := make([]bool, len(advances))
		if n == 0 {
			return updated, nil
		}
		rows, err := s.pool.Query(ctx, sqlAdvanceCursors, partition, clients, actors, epochs, cursors, ats, idx, checked)
		if err != nil {
			return nil, fmt.Errorf("advance client cursors: %w", storageFull(err))
		}
		var i int32
		_, err = pgx.ForEachRow(rows, []any{&i}, func() error {
			if i >= 0 && int(i) < len(updated) {
				updated[i] = true
			}
			return nil
		})
		if err != nil {
			return nil, fmt.Errorf("advance client cursors: %w", storageFull(err))
		}
		return updated, nil
	}
	if s.clients == nil {
		return run()
	}
	return s.clients.AdvanceMany(partition, advances, run)
}

// checkedSubscriptions reads the stored subscription lists of the
// advances that carry a digest of their socket's (store.CursorAdvance):
// ok is false for those whose record is absent or stores another list,
// and subs holds, for those that match, the list read, which the update
// requires still stored. Advances without a digest are ok, with a nil
// list (unchecked).
func (s *Store) checkedSubscriptions(ctx context.Context, partition string, advances []store.CursorAdvance) (subs []*string, ok []bool, err error) {
	subs, ok = make([]*string, len(advances)), make([]bool, len(advances))
	var ids []string
	for i, a := range advances {
		ok[i] = a.Subscriptions == 0
		if !ok[i] {
			ids = append(ids, a.ClientID)
		}
	}
	if len(ids) == 0 {
		return subs, ok, nil
	}
	stored := make(map[string]string, len(ids))
	rows, err := s.pool.Query(ctx, sqlClientSubscriptions, partition, ids)
	if err != nil {
		return nil, nil, err
	}
	var id, text string
	if _, err := pgx.ForEachRow(rows, []any{&id, &text}, func() error {
		stored[id] = text
		return nil
	}); err != nil {
		return nil, nil, err
	}
	for i, a := range advances {
		text, found := stored[a.ClientID]
		if ok[i] || !found {
			continue
		}
		if store.StoredSubscriptionsMatch(a, []byte(text), decodeSubscriptions) {
			ok[i], subs[i] = true, &text
		}
	}
	return subs, ok, nil
}

// ActiveCursorFloor returns the lowest cursor among the partition's
// clients updated at or after sinceMs that have one (cursor ≥ 0).
func (s *Store) ActiveCursorFloor(ctx context.Context, partition string, sinceMs int64) (int64, bool, error) {
	if err := s.check(); err != nil {
		return 0, false, err
	}
	if s.clients != nil {
		// The deferred records of this process count.
		if err := s.clients.Flush(ctx); err != nil {
			return 0, false, fmt.Errorf("active cursor floor: %w", err)
		}
	}
	var floor *int64
	if err := s.pool.QueryRow(ctx, sqlActiveCursorFloor, partition, sinceMs).Scan(&floor); err != nil {
		return 0, false, fmt.Errorf("active cursor floor: %w", err)
	}
	if floor == nil {
		return 0, false, nil
	}
	return *floor, true, nil
}
