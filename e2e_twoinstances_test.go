package syncgo_test

import (
	"context"
	"fmt"
	"sync"
	"testing"

	"github.com/syncgo/syncgo/internal/pgtest"
	"github.com/syncgo/syncgo/internal/sspclient"
	"github.com/syncgo/syncgo/pgstore"
	"github.com/syncgo/syncgo/store"
	"github.com/syncgo/syncgo/wire"
)

// Two servers on one database (Postgres; SQLite serves one process per
// file, so there the two are one server): writers push through both while
// a puller on each pulls, and one commit id is delivered to both at once.
// The duplicate applies once, every answer names its commitSeq, the log is
// dense, and each puller's replica ends equal to the server: no pull moved
// its cursor past a commit that became visible after it.
func TestE2ETwoInstancesExactlyOnceAndNoSkippedCommit(t *testing.T) {
	forEachDriver(t, func(t *testing.T, d e2eDriver) {
		envs := twoInstances(t, d)
		seed := envs[0].client("alice", sspclient.Options{})
		syncQuiet(t, seed)
		epoch := envs[0].partitionState().LogEpoch

		pullers := make([]*sspclient.Client, 2)
		for i := range pullers {
			pullers[i] = envs[i].client("reader", sspclient.Options{})
			mustSubscribe(t, pullers[i], "tasks-p1", "p1")
			syncQuiet(t, pullers[i])
		}
		const writers, commits, dups = 4, 15, 6
		var wg sync.WaitGroup
		for i := range writers {
			wg.Go(func() {
				c := envs[i%2].client(fmt.Sprintf("writer-%d", i), sspclient.Options{})
				for j := range commits {
					if _, err := c.Upsert("tasks", taskRow(fmt.Sprintf("w%d-%02d", i, j), "p1", "x")); err != nil {
						t.Errorf("writer %d: %v", i, err)
						return
					}
					if _, err := c.Sync(context.Background()); err != nil {
						t.Errorf("writer %d sync: %v", i, err)
						return
					}
				}
			})
		}
		done := make(chan struct{})
		var pulls sync.WaitGroup
		for i, p := range pullers {
			pulls.Go(func() {
				for {
					select {
					case <-done:
						return
					default:
					}
					if _, err := p.Sync(context.Background()); err != nil {
						t.Errorf("puller %d: %v", i, err)
						return
					}
				}
			})
		}
		results := make([]*wire.PushResult, 2*dups)
		for k := range dups {
			req := encodeRequest(t, &wire.Request{Version: 3,
				Header: &wire.ReqHeader{ClientID: "dup-device", SchemaVersion: 1, LogEpoch: &epoch},
				Commits: []*wire.PushCommit{{ClientCommitID: fmt.Sprintf("dup-%d", k),
					Operations: []wire.Operation{envs[0].upsertOp(t, taskRow(fmt.Sprintf("dup-%d", k), "p1", "once"))}}}})
			for i := range 2 {
				wg.Go(func() {
					r := envs[i].post(t, body(req), nil)
					m, err := wire.DecodeMessage(r.body, wire.DecoderOptions{Kind: wire.KindResponse})
					if err != nil || len(m.Frames) < 2 {
						t.Errorf("dup %d on server %d: HTTP %d, %v", k, i, r.status, err)
						return
					}
					results[2*k+i], _ = m.Frames[1].(*wire.PushResult)
				})
			}
		}
		wg.Wait()
		close(done)
		pulls.Wait()
		if t.Failed() {
			return
		}
		for k := range dups {
			a, b := results[2*k], results[2*k+1]
			if a == nil || b == nil {
				t.Fatalf("dup %d: no PUSH_RESULT (%v, %v)", k, a, b)
			}
			applied := 0
			for _, r := range []*wire.PushResult{a, b} {
				if r.Status == wire.PushApplied {
					applied++
				} else if r.Status != wire.PushCached {
					t.Fatalf("dup %d: %s", k, r.Status)
				}
			}
			if applied != 1 || a.CommitSeq != b.CommitSeq || a.CommitSeq == 0 {
				t.Fatalf("dup %d: %s@%d and %s@%d, want one applied and one cached at one commitSeq",
					k, a.Status, a.CommitSeq, b.Status, b.CommitSeq)
			}
		}
		if p, want := envs[0].partitionState(), int64(writers*commits+dups); p.MaxCommitSeq != want {
			t.Fatalf("MaxCommitSeq %d, want %d", p.MaxCommitSeq, want)
		}
		server := envs[0].serverRows("tasks")
		for i, p := range pullers {
			syncQuiet(t, p)
			sameRows(t, fmt.Sprintf("puller %d", i), clientRows(t, p, "tasks"), server)
		}
	})
}

// twoInstances starts two servers on one Postgres database, or one SQLite
// server twice.
func twoInstances(t *testing.T, d e2eDriver) [2]*e2eEnv {
	t.Helper()
	if d.name != "postgres" {
		e := newE2EEnv(t, d)
		return [2]*e2eEnv{e, e}
	}
	url := pgtest.Schema(t, "syncgo_e2e", false)
	open := func(t *testing.T) store.Store {
		s, err := pgstore.Open(context.Background(), pgstore.Config{URL: url, MaxConns: 8})
		if err != nil {
			t.Fatalf("pgstore.Open: %v", err)
		}
		t.Cleanup(func() { _ = s.Close() })
		return s
	}
	shared := e2eDriver{name: d.name, open: open}
	return [2]*e2eEnv{newE2EEnv(t, shared), newE2EEnv(t, shared)}
}
