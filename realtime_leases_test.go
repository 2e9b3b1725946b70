package syncgo_test

import (
	"context"
	"fmt"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/syncgo/syncgo"
	"github.com/syncgo/syncgo/store"
)

// An open socket during an outage of the scope authority keeps what the
// client's lease grants (the periodic and host-triggered re-resolutions
// read the lease), and a revocation of the lease takes effect on the
// socket at once: its registrations drop, a catch-up wake follows and no
// delta after it.
func TestRealtimeLeaseServesSocketsUntilRevoked(t *testing.T) {
	forEachDriver(t, func(t *testing.T, d e2eDriver) {
		g := &rtGrants{}
		g.set("alice", "p1", "p2")
		var outage atomic.Bool
		st := d.open(t)
		e := newGrantEnv(t, st, g, func(c *syncgo.Config) {
			c.Leases = &syncgo.LeaseConfig{TTL: time.Hour}
			c.ResolveScopes = func(ctx context.Context, req syncgo.ScopeRequest) (map[string][]string, error) {
				if outage.Load() && req.ActorID == "alice" {
					return nil, fmt.Errorf("directory down: %w", syncgo.ErrAuthorityUnavailable)
				}
				return g.resolve(ctx, req)
			}
		})
		s, _ := grantSetup(t, e, e) // alice's pull issued her lease
		outage.Store(true)
		if err := e.srv.RevokeActor(context.Background(), rtPartition, "alice"); err != nil {
			t.Fatal(err)
		}
		bob := e.peer("bob", "b1")
		bob.push("c1", rtTask{id: "x1", project: "p2"})
		if rows, _ := rtDeltaRows(s.delta()); !slices.Equal(rows, []string{"x1"}) {
			t.Fatalf("delta rows %v during the outage; want [x1] (the lease grants p2)", rows)
		}
		l, err := st.(store.LeaseStore).LoadLease(context.Background(), rtPartition, "a1")
		if err != nil {
			t.Fatal(err)
		}
		if err := e.srv.RevokeLease(context.Background(), rtPartition, l.LeaseID); err != nil {
			t.Fatal(err)
		}
		w := s.wake()
		s.ack(w.Cursor)
		s.barrier()
		bob.push("c2", rtTask{id: "x2", project: "p1"})
		s.barrier()
		if m, ok := s.tryNext(100 * time.Millisecond); ok {
			t.Fatalf("after the lease was revoked the socket got %v; want nothing", m)
		}
	})
}
