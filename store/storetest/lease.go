package storetest

import (
	"errors"
	"reflect"
	"testing"

	"github.com/syncgo/syncgo/store"
)

// RunLeases tests the auth-lease store (store.LeaseStore, §7.3): issue and
// sliding refresh under a stable id, a new id for another actor, durable
// revocation that a refresh never undoes, one partition's leases apart
// from another's. A driver that is not a store.LeaseStore skips it.
func RunLeases(t *testing.T, open Opener) {
	runCases(t, open, []testCase{
		{"IssueRefreshRevoke", testLeaseLifecycle},
	})
}

func testLeaseLifecycle(t *testing.T, open Opener) {
	e := newEnv(t, open)
	ls, ok := e.s.(store.LeaseStore)
	if !ok {
		t.Skip("the driver is not a store.LeaseStore")
	}
	if _, err := ls.LoadLease(e.ctx, "p", "c1"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("LoadLease of no lease = %v, want ErrNotFound", err)
	}
	scopes := map[string][]string{"project_id": {"p1", "*"}}
	issue := func(id, actor string, at int64) store.Lease {
		t.Helper()
		l, err := ls.IssueLease(e.ctx, "p", "c1", store.Lease{LeaseID: id, ActorID: actor, AllowedScopes: scopes,
			IssuedAtMs: at, ExpiresAtMs: at + 1000})
		if err != nil {
			t.Fatal(err)
		}
		return l
	}
	load := func() store.Lease {
		t.Helper()
		l, err := ls.LoadLease(e.ctx, "p", "c1")
		if err != nil {
			t.Fatal(err)
		}
		return l
	}
	if l := issue("L1", "alice", 10); l.LeaseID != "L1" {
		t.Fatalf("first issue got id %q", l.LeaseID)
	}
	if l := issue("L2", "alice", 20); l.LeaseID != "L1" || l.ExpiresAtMs != 1020 {
		t.Fatalf("refresh = %+v, want L1 sliding to 1020", l)
	}
	want := store.Lease{LeaseID: "L1", ActorID: "alice", AllowedScopes: scopes, IssuedAtMs: 20, ExpiresAtMs: 1020}
	if got := load(); !reflect.DeepEqual(got, want) {
		t.Fatalf("LoadLease = %+v, want %+v", got, want)
	}
	if l := issue("L3", "bob", 30); l.LeaseID != "L3" {
		t.Fatalf("another actor's issue kept id %q", l.LeaseID)
	}
	if err := ls.RevokeLease(e.ctx, "p", "L3"); err != nil {
		t.Fatal(err)
	}
	if l := load(); !l.Revoked || l.LeaseID != "L3" {
		t.Fatalf("after revoke: %+v", l)
	}
	if l := issue("L4", "bob", 40); l.LeaseID != "L4" || l.Revoked {
		t.Fatalf("issue after revoke = %+v, want the new id L4", l)
	}
	// A revoked id stays revoked even when a lease takes it again.
	if err := ls.RevokeLease(e.ctx, "p", "L5"); err != nil {
		t.Fatal(err)
	}
	if _, err := ls.IssueLease(e.ctx, "p", "c2", store.Lease{LeaseID: "L5", ActorID: "carol", IssuedAtMs: 1, ExpiresAtMs: 2}); err != nil {
		t.Fatal(err)
	}
	if l, err := ls.LoadLease(e.ctx, "p", "c2"); err != nil || !l.Revoked {
		t.Fatalf("a lease holding a revoked id: %+v, %v; want revoked", l, err)
	}
	if _, err := ls.LoadLease(e.ctx, "q", "c1"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("another partition's lease: %v, want ErrNotFound", err)
	}
}
