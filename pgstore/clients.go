package pgstore

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/syncgo/syncgo/store"
)

// Client returns a client record.
func (s *Store) Client(ctx context.Context, partition, clientID string) (store.ClientRecord, error) {
	if err := s.check(); err != nil {
		return store.ClientRecord{}, err
	}
	rec := store.ClientRecord{ClientID: clientID}
	var (
		wireVersion int32
		subs        []byte
	)
	err := s.pool.QueryRow(ctx, sqlClient, partition, clientID).
		Scan(&rec.ActorID, &wireVersion, &rec.Cursor, &subs, &rec.UpdatedAtMs)
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

// PutClient creates or replaces a client record.
func (s *Store) PutClient(ctx context.Context, partition string, rec store.ClientRecord) error {
	if err := s.checkWrite(); err != nil {
		return err
	}
	subs, err := store.EncodeSubscriptions(rec.Subscriptions)
	if err != nil {
		return fmt.Errorf("put client: %w", err)
	}
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

// BindClient creates a client record unless one exists, and returns the
// stored record.
func (s *Store) BindClient(ctx context.Context, partition string, rec store.ClientRecord) (store.ClientRecord, error) {
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
	if err := s.checkWrite(); err != nil {
		return false, err
	}
	var (
		epochOK bool
		updated int64
	)
	err := s.pool.QueryRow(ctx, sqlAdvanceCursor, partition, a.ClientID, a.ActorID, a.Cursor, a.AtMs, a.LogEpoch).
		Scan(&epochOK, &updated)
	if err != nil {
		return false, fmt.Errorf("advance client cursor: %w", storageFull(err))
	}
	if !epochOK {
		return false, store.ErrEpochMismatch
	}
	return updated > 0, nil
}

// ActiveCursorFloor returns the lowest cursor among the partition's
// clients updated at or after sinceMs that have one (cursor ≥ 0).
func (s *Store) ActiveCursorFloor(ctx context.Context, partition string, sinceMs int64) (int64, bool, error) {
	if err := s.check(); err != nil {
		return 0, false, err
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
