package engine

import (
	"context"
	"errors"

	"github.com/syncgo/syncgo/hostapi"
	"github.com/syncgo/syncgo/store"
	"github.com/syncgo/syncgo/syncerr"
	"github.com/syncgo/syncgo/wire"
)

// ErrAuthorityUnavailable is what a scope resolver returns (or wraps) to
// signal that the host's live authority is unreachable: an outage, not a
// denial (§7.3.3). With leases configured, the request is then authorized
// against the client's stored lease; without, it fails closed like any
// resolver error.
var ErrAuthorityUnavailable = errors.New("the scope authority is unavailable")

// LeaseConfig is hostapi.LeaseConfig.
type LeaseConfig = hostapi.LeaseConfig

// leaseAllowed authorizes against the stored lease of (partition,
// clientID) during an outage: the lease's allowed scopes when it is valid
// (not expired, not revoked, the same actor); sync.auth_lease_revoked for
// a revoked one; sync.auth_lease_required otherwise.
func (e *Engine) leaseAllowed(ctx context.Context, auth Auth, clientID string) (map[string][]string, error) {
	ls, ok := e.cfg.Store.(store.LeaseStore)
	if !ok {
		return nil, syncerr.New(syncerr.CodeAuthLeaseRequired, "authorization is unavailable and the storage keeps no leases")
	}
	l, err := ls.LoadLease(ctx, auth.Partition, clientID)
	switch {
	case errors.Is(err, store.ErrNotFound):
		return nil, syncerr.New(syncerr.CodeAuthLeaseRequired, "authorization is unavailable and the client holds no lease")
	case err != nil:
		return nil, err
	case l.Revoked:
		return nil, syncerr.New(syncerr.CodeAuthLeaseRevoked, "the client's lease was revoked")
	case l.ActorID != auth.ActorID || e.cfg.Now() >= l.ExpiresAtMs:
		return nil, syncerr.New(syncerr.CodeAuthLeaseRequired, "authorization is unavailable and the client's lease is not valid")
	}
	allowed := make(map[string][]string, len(l.AllowedScopes))
	for k, v := range l.AllowedScopes {
		if e.cfg.Schema.DeclaresVariable(k) {
			allowed[k] = v
		}
	}
	return allowed, nil
}

// issueLease issues or slides the client's lease after a live resolution
// (§7.3.3) and keeps the LEASE frame to send. A lease that cannot be
// stored is logged, and the round goes on without one.
func (r *request) issueLease(ctx context.Context, allowed map[string][]string) {
	lc := r.e.cfg.Leases
	ls, ok := r.e.cfg.Store.(store.LeaseStore)
	if lc == nil || !ok {
		return
	}
	now := r.e.cfg.Now()
	l, err := ls.IssueLease(ctx, r.auth.Partition, r.req.Header.ClientID, store.Lease{LeaseID: "lease_" + randomEpoch(),
		ActorID: r.auth.ActorID, AllowedScopes: allowed, IssuedAtMs: now, ExpiresAtMs: now + lc.TTL.Milliseconds()})
	if err != nil {
		r.e.cfg.Logger.WarnContext(ctx, "lease not issued", "partition", r.auth.Partition, "err", err)
		return
	}
	r.lease = &wire.Lease{LeaseID: l.LeaseID, ExpiresAtMs: l.ExpiresAtMs}
}

// RevokeLease revokes a lease by id (§7.3.4): the next round that would be
// authorized by it fails with sync.auth_lease_revoked.
func (e *Engine) RevokeLease(ctx context.Context, partition, leaseID string) error {
	ls, ok := e.cfg.Store.(store.LeaseStore)
	if !ok {
		return errors.New("the storage keeps no leases")
	}
	return ls.RevokeLease(ctx, partition, leaseID)
}
