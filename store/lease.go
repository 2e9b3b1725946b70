package store

import "context"

// Auth leases (§7.3): a server-issued, time-bounded record of an actor's
// resolved scopes, kept per (partition, clientId) so that every process of
// a fleet can authorize a round against it while the host's live
// authority is unavailable.

// Lease is a stored lease.
type Lease struct {
	LeaseID string
	ActorID string
	// AllowedScopes are the actor's resolved allowed scopes at issuance
	// (§3.2 shape; "*" allows any value).
	AllowedScopes map[string][]string
	IssuedAtMs    int64
	ExpiresAtMs   int64
	// Revoked reports a revoked lease (its id is in the revocations).
	Revoked bool
}

// LeaseStore is implemented by stores that keep leases (both drivers), in
// the tables sync_leases and sync_lease_revocations.
type LeaseStore interface {
	// IssueLease stores the lease of (partition, clientID): it keeps the
	// stored lease's id when that lease is of the same actor and not
	// revoked (a sliding refresh), and takes l.LeaseID otherwise (a new
	// lease; a revoked id never comes back). It returns the stored lease.
	IssueLease(ctx context.Context, partition, clientID string, l Lease) (Lease, error)
	// LoadLease reads the lease of (partition, clientID); ErrNotFound when
	// there is none.
	LoadLease(ctx context.Context, partition, clientID string) (Lease, error)
	// RevokeLease records the revocation of a lease id, durably, whether
	// or not a lease holds it now.
	RevokeLease(ctx context.Context, partition, leaseID string) error
}
