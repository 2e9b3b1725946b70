package pgstore

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/syncgo/syncgo/store"
)

var _ store.LeaseStore = (*Store)(nil)

// sqlIssueLease slides the stored lease of the same actor when it is not
// revoked, and takes the new id otherwise, in one statement (the row lock
// of the upsert orders concurrent issues of one client).
const sqlIssueLease = `INSERT INTO sync_leases(partition, client_id, lease_id, actor_id, allowed_scopes, issued_at_ms, expires_at_ms, revoked)
VALUES ($1, $2, $3, $4, $5, $6, $7, 0)
ON CONFLICT (partition, client_id) DO UPDATE SET
  lease_id = CASE WHEN sync_leases.actor_id = EXCLUDED.actor_id AND sync_leases.revoked = 0
                   AND NOT EXISTS (SELECT 1 FROM sync_lease_revocations r
                                    WHERE r.partition = sync_leases.partition AND r.lease_id = sync_leases.lease_id)
             THEN sync_leases.lease_id ELSE EXCLUDED.lease_id END,
  actor_id = EXCLUDED.actor_id, allowed_scopes = EXCLUDED.allowed_scopes,
  issued_at_ms = EXCLUDED.issued_at_ms, expires_at_ms = EXCLUDED.expires_at_ms, revoked = 0
RETURNING lease_id`

const sqlLoadLease = `SELECT l.lease_id, l.actor_id, l.allowed_scopes, l.issued_at_ms, l.expires_at_ms,
  (l.revoked <> 0 OR EXISTS (SELECT 1 FROM sync_lease_revocations r WHERE r.partition = l.partition AND r.lease_id = l.lease_id))
FROM sync_leases l WHERE l.partition = $1 AND l.client_id = $2`

// IssueLease implements store.LeaseStore.
func (s *Store) IssueLease(ctx context.Context, partition, clientID string, l store.Lease) (store.Lease, error) {
	if err := s.checkWrite(); err != nil {
		return store.Lease{}, err
	}
	scopes, err := store.EncodeLeaseScopes(l.AllowedScopes)
	if err != nil {
		return store.Lease{}, fmt.Errorf("issue lease: %w", err)
	}
	if err := s.pool.QueryRow(ctx, sqlIssueLease, partition, clientID, l.LeaseID, l.ActorID, scopes,
		l.IssuedAtMs, l.ExpiresAtMs).Scan(&l.LeaseID); err != nil {
		return store.Lease{}, fmt.Errorf("issue lease: %w", storageFull(err))
	}
	l.Revoked = false
	return l, nil
}

// LoadLease implements store.LeaseStore.
func (s *Store) LoadLease(ctx context.Context, partition, clientID string) (store.Lease, error) {
	return retry(s, ctx, "LoadLease", func() (store.Lease, error) { return s.loadLeaseOnce(ctx, partition, clientID) })
}

// loadLeaseOnce is LoadLease, once (see "Lost connections", retry.go).
func (s *Store) loadLeaseOnce(ctx context.Context, partition, clientID string) (store.Lease, error) {
	if err := s.check(); err != nil {
		return store.Lease{}, err
	}
	var l store.Lease
	var scopes string
	err := s.pool.QueryRow(ctx, sqlLoadLease, partition, clientID).
		Scan(&l.LeaseID, &l.ActorID, &scopes, &l.IssuedAtMs, &l.ExpiresAtMs, &l.Revoked)
	if errors.Is(err, pgx.ErrNoRows) {
		return store.Lease{}, store.ErrNotFound
	}
	if err != nil {
		return store.Lease{}, fmt.Errorf("load lease: %w", err)
	}
	if l.AllowedScopes, err = store.DecodeLeaseScopes(scopes); err != nil {
		return store.Lease{}, err
	}
	return l, nil
}

// RevokeLease implements store.LeaseStore.
func (s *Store) RevokeLease(ctx context.Context, partition, leaseID string) error {
	if err := s.checkWrite(); err != nil {
		return err
	}
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `INSERT INTO sync_lease_revocations(partition, lease_id) VALUES ($1, $2) ON CONFLICT DO NOTHING`,
			partition, leaseID); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, `UPDATE sync_leases SET revoked = 1 WHERE partition = $1 AND lease_id = $2`, partition, leaseID)
		return err
	})
	if err != nil {
		return fmt.Errorf("revoke lease: %w", err)
	}
	return nil
}
