package syncgo_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/syncgo/syncgo"
	"github.com/syncgo/syncgo/schema"
	"github.com/syncgo/syncgo/store"
	"github.com/syncgo/syncgo/syncerr"
	"github.com/syncgo/syncgo/wire"
)

// leaseFleet is two servers on one database (two processes of a fleet),
// sharing a clock and a scope authority that can be down.
type leaseFleet struct {
	now     atomic.Int64
	outage  atomic.Bool
	failing atomic.Bool
	srv     [2]*syncgo.Server
	st      [2]store.Store
	url     [2]string
}

func newLeaseFleet(t *testing.T, e *barrierEnv, sc *schema.Compiled, ttl time.Duration) *leaseFleet {
	f := &leaseFleet{}
	f.now.Store(1_750_000_000_000)
	for i := range f.srv {
		f.st[i] = e.open()
		srv, err := syncgo.New(syncgo.Config{
			Store: f.st[i], Schema: sc, RetentionInterval: -1, Now: f.now.Load, Leases: &syncgo.LeaseConfig{TTL: ttl},
			Authenticate: func(*http.Request) (syncgo.Auth, error) { return syncgo.Auth{ActorID: "alice", Partition: "p"}, nil },
			ResolveScopes: func(context.Context, syncgo.ScopeRequest) (map[string][]string, error) {
				if f.failing.Load() {
					return nil, errors.New("directory says no")
				}
				if f.outage.Load() {
					return nil, fmt.Errorf("directory down: %w", syncgo.ErrAuthorityUnavailable)
				}
				return map[string][]string{"project_id": {"p1"}}, nil
			},
		})
		if err != nil {
			t.Fatal(err)
		}
		if err := srv.Start(context.Background()); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { srv.Stop(context.Background()) })
		hs := httptest.NewServer(srv.Handler())
		t.Cleanup(hs.Close)
		f.srv[i], f.url[i] = srv, hs.URL
	}
	return f
}

// Auth leases over real HTTP with two servers on one database, on both
// drivers: a lease issued by one process authorizes a push and a pull on
// the other during an outage of the scope authority, is not refreshed
// meanwhile, stops at its expiry (sync.auth_lease_required), comes back
// with the same id on the next live round, and once revoked through one
// process is refused by the other (sync.auth_lease_revoked); the next live
// round issues a fresh id. A resolver error that is not the outage signal
// still fails closed.
func TestE2ELeasesAcrossAFleet(t *testing.T) {
	forEachBarrierDriver(t, func(t *testing.T, e *barrierEnv) {
		v1, _ := windowSchemas(t)
		const ttl = time.Minute
		f := newLeaseFleet(t, e, v1, ttl)
		status, b := post(t, f.url[0], pullReq(nil, 1))
		m, err := wire.DecodeMessage(b, wire.DecoderOptions{})
		if status != 200 || err != nil {
			t.Fatalf("epoch round: %d %v", status, err)
		}
		epoch := m.Frames[0].(*wire.RespHeader).LogEpoch
		round := func(i int, commit string) (int, []byte, *wire.Lease) {
			t.Helper()
			req := pullReq(&epoch, 1)
			if commit != "" {
				req.Commits = []*wire.PushCommit{{ClientCommitID: commit, Operations: []wire.Operation{{Table: "tasks", RowID: commit,
					Op: wire.OpUpsert, Payload: sparse(t, v1, wire.Value{Str: commit}, wire.Value{Str: "p1"}, wire.Value{Str: "x"})}}}}
			}
			status, b := post(t, f.url[i], req)
			if status != 200 {
				return status, b, nil
			}
			m, err := wire.DecodeMessage(b, wire.DecoderOptions{Kind: wire.KindResponse})
			if err != nil {
				t.Fatal(err)
			}
			for _, fr := range m.Frames {
				if l, ok := fr.(*wire.Lease); ok {
					return status, b, l
				}
			}
			return status, b, nil
		}
		wantCode := func(what string, status int, b []byte, code string) {
			t.Helper()
			pe, err := syncerr.ParseJSON(b)
			if status != http.StatusUnauthorized || err != nil || pe.Code != code {
				t.Fatalf("%s: HTTP %d %s, want 401 %s", what, status, b, code)
			}
		}

		_, _, l1 := round(0, "")
		if l1 == nil || l1.ExpiresAtMs != f.now.Load()+ttl.Milliseconds() {
			t.Fatalf("live round on process 0: lease %+v", l1)
		}
		f.outage.Store(true)
		f.now.Add(30_000)
		status, _, l := round(1, "offline")
		if status != 200 || l != nil {
			t.Fatalf("outage round on process 1: HTTP %d, lease frame %+v (want served, no refresh)", status, l)
		}
		if _, err := f.st[1].Row(context.Background(), "p", "tasks", "offline"); err != nil {
			t.Fatalf("the leased push did not land: %v", err)
		}
		f.now.Add(ttl.Milliseconds())
		status, b, _ = round(1, "too-late")
		wantCode("outage round past the lease's expiry", status, b, syncerr.CodeAuthLeaseRequired)

		f.outage.Store(false)
		_, _, l2 := round(0, "")
		if l2 == nil || l2.LeaseID != l1.LeaseID {
			t.Fatalf("live round after recovery: lease %+v, want %s again", l2, l1.LeaseID)
		}
		// A resolver that fails (not the outage signal) fails closed,
		// valid lease or not: the push is forbidden.
		f.failing.Store(true)
		status, b, _ = round(1, "failing")
		if m, err := wire.DecodeMessage(b, wire.DecoderOptions{Kind: wire.KindResponse}); status != 200 || err != nil ||
			m.Frames[1].(*wire.PushResult).Status != wire.PushRejected || m.Frames[1].(*wire.PushResult).Results[0].Code != syncerr.CodeForbidden {
			t.Fatalf("a failing resolver: HTTP %d %v", status, err)
		}
		f.failing.Store(false)
		if err := f.srv[1].RevokeLease(context.Background(), "p", l2.LeaseID); err != nil {
			t.Fatal(err)
		}
		f.outage.Store(true)
		status, b, _ = round(0, "revoked")
		wantCode("outage round on a revoked lease", status, b, syncerr.CodeAuthLeaseRevoked)
		f.outage.Store(false)
		_, _, l3 := round(1, "")
		if l3 == nil || l3.LeaseID == l1.LeaseID {
			t.Fatalf("live round after revocation: lease %+v, want a fresh id", l3)
		}
		for _, id := range []string{"too-late", "revoked"} {
			if _, err := f.st[0].Row(context.Background(), "p", "tasks", id); err == nil {
				t.Errorf("refused push %s landed", id)
			}
		}
	})
}
