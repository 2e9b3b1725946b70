package sqlitestore

import (
	"context"
	"errors"
	"fmt"

	"github.com/syncgo/syncgo/store"
)

var _ store.LeaseStore = (*Store)(nil)

// sqlIssueLease slides the stored lease of the same actor when it is not
// revoked, and takes the new id otherwise, in one statement.
const sqlIssueLease = `INSERT INTO sync_leases(partition, client_id, lease_id, actor_id, allowed_scopes, issued_at_ms, expires_at_ms, revoked)
VALUES (?,?,?,?,?,?,?,0)
ON CONFLICT(partition, client_id) DO UPDATE SET
  lease_id = CASE WHEN sync_leases.actor_id = excluded.actor_id AND sync_leases.revoked = 0
                   AND NOT EXISTS (SELECT 1 FROM sync_lease_revocations r
                                    WHERE r.partition = sync_leases.partition AND r.lease_id = sync_leases.lease_id)
             THEN sync_leases.lease_id ELSE excluded.lease_id END,
  actor_id = excluded.actor_id, allowed_scopes = excluded.allowed_scopes,
  issued_at_ms = excluded.issued_at_ms, expires_at_ms = excluded.expires_at_ms, revoked = 0
RETURNING lease_id`

const sqlLoadLease = `SELECT l.lease_id, l.actor_id, l.allowed_scopes, l.issued_at_ms, l.expires_at_ms,
  (l.revoked <> 0 OR EXISTS (SELECT 1 FROM sync_lease_revocations r WHERE r.partition = l.partition AND r.lease_id = l.lease_id))
FROM sync_leases l WHERE l.partition = ? AND l.client_id = ?`

// IssueLease implements store.LeaseStore.
func (s *Store) IssueLease(ctx context.Context, partition, clientID string, l store.Lease) (store.Lease, error) {
	scopes, err := store.EncodeLeaseScopes(l.AllowedScopes)
	if err != nil {
		return store.Lease{}, fmt.Errorf("issue lease: %w", err)
	}
	err = s.w.do(ctx, func(_ context.Context, c *conn) error {
		return c.queryRow(sqlIssueLease, partition, clientID, l.LeaseID, l.ActorID, scopes, l.IssuedAtMs, l.ExpiresAtMs).
			Scan(&l.LeaseID)
	})
	if err != nil {
		return store.Lease{}, fmt.Errorf("issue lease: %w", err)
	}
	l.Revoked = false
	return l, nil
}

// LoadLease implements store.LeaseStore.
func (s *Store) LoadLease(ctx context.Context, partition, clientID string) (store.Lease, error) {
	if s.closed.Load() {
		return store.Lease{}, store.ErrClosed
	}
	var l store.Lease
	var scopes string
	var revoked int64
	err := s.read(ctx, func(c *conn) error {
		return c.queryRow(sqlLoadLease, partition, clientID).
			Scan(&l.LeaseID, &l.ActorID, &scopes, &l.IssuedAtMs, &l.ExpiresAtMs, &revoked)
	})
	if errors.Is(err, errNoRows) {
		return store.Lease{}, store.ErrNotFound
	}
	if err != nil {
		return store.Lease{}, fmt.Errorf("load lease: %w", err)
	}
	l.Revoked = revoked != 0
	if l.AllowedScopes, err = store.DecodeLeaseScopes(scopes); err != nil {
		return store.Lease{}, err
	}
	return l, nil
}

// RevokeLease implements store.LeaseStore.
func (s *Store) RevokeLease(ctx context.Context, partition, leaseID string) error {
	err := s.w.do(ctx, func(_ context.Context, c *conn) error {
		if err := c.exec(`INSERT INTO sync_lease_revocations(partition, lease_id) VALUES (?,?) ON CONFLICT DO NOTHING`,
			partition, leaseID); err != nil {
			return err
		}
		return c.exec(`UPDATE sync_leases SET revoked = 1 WHERE partition = ? AND lease_id = ?`, partition, leaseID)
	})
	if err != nil {
		return fmt.Errorf("revoke lease: %w", err)
	}
	return nil
}
