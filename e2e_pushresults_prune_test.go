package syncgo_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	syncgo "github.com/syncgo/syncgo"
	"github.com/syncgo/syncgo/internal/sspclient"
	"github.com/syncgo/syncgo/store"
	"github.com/syncgo/syncgo/wire"
)

// retention.push_results_max_age over HTTP (§2.3): a commit recorded
// longer ago than the age loses its journal record to the prune, and a
// retry of its clientCommitId is then applied anew, as a new commit (the
// documented cost of the setting); a younger commit's retry is still
// answered cached with its first commitSeq. The prune runs once through
// Server.PrunePushResults and once through the retention rounds, which
// count it in syncgo_push_results_pruned_total.
func TestE2EPushResultsPrune(t *testing.T) {
	const day = 24 * time.Hour
	forEachDriver(t, func(t *testing.T, d e2eDriver) {
		for _, viaRounds := range []bool{false, true} {
			name := "explicit"
			if viaRounds {
				name = "rounds"
			}
			t.Run(name, func(t *testing.T) {
				var now atomic.Int64
				now.Store(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC).UnixMilli())
				pol := syncgo.RetentionPolicy{PushResultsMaxAge: 30 * day}
				e := newMetricsEnv(t, d, func(c *syncgo.Config) {
					c.Now = now.Load
					c.Retention = pol
					if viaRounds {
						c.RetentionInterval = 20 * time.Millisecond
					}
				})
				seed := e.client("alice", sspclient.Options{})
				syncQuiet(t, seed)
				epoch := e.partitionState().LogEpoch
				push := func(id, title string) *wire.PushResult {
					t.Helper()
					m := decodeResponse(t, e.post(t, body(encodeRequest(t, &wire.Request{Version: wire.Version3,
						Header:  &wire.ReqHeader{ClientID: "retrier", SchemaVersion: 1, LogEpoch: &epoch},
						Commits: []*wire.PushCommit{{ClientCommitID: id, Operations: []wire.Operation{e.upsertOp(t, taskRow("t-"+id, "p1", title))}}}})), nil))
					for _, f := range m.Frames {
						if pr, ok := f.(*wire.PushResult); ok {
							return pr
						}
					}
					t.Fatalf("no PUSH_RESULT for %s", id)
					return nil
				}
				old := push("old", "first")
				if old.Status != wire.PushApplied {
					t.Fatalf("first push of old: %s", old.Status)
				}
				now.Add((20 * day).Milliseconds())
				young := push("young", "first")
				if young.Status != wire.PushApplied {
					t.Fatalf("first push of young: %s", young.Status)
				}
				// 20 days old, within the age: still cached, whenever the rounds run.
				if r := push("old", "first"); r.Status != wire.PushCached || r.CommitSeq != old.CommitSeq {
					t.Fatalf("retry of old within the age: %s seq %d; want cached %d", r.Status, r.CommitSeq, old.CommitSeq)
				}
				now.Add((15 * day).Milliseconds()) // old recorded 35 days ago, young 15

				if viaRounds {
					deadline := time.Now().Add(10 * time.Second)
					for {
						_, err := e.store.PushResult(context.Background(), e2ePartition, "retrier", "old")
						if errors.Is(err, store.ErrNotFound) {
							break
						}
						if time.Now().After(deadline) {
							t.Fatalf("the retention rounds did not prune old's record in 10 s: %v", err)
						}
						time.Sleep(20 * time.Millisecond)
					}
					if v, ok := e.scrape().value("syncgo_push_results_pruned_total"); !ok || v != 1 {
						t.Fatalf("syncgo_push_results_pruned_total = %v (%v); want 1", v, ok)
					}
				} else {
					n, err := e.srv.PrunePushResults(context.Background(), pol)
					if err != nil || n != 1 {
						t.Fatalf("PrunePushResults = %d, %v; want 1 (old's record only)", n, err)
					}
				}

				again := push("old", "first")
				if again.Status != wire.PushApplied || again.CommitSeq <= young.CommitSeq {
					t.Fatalf("retry of old after the prune: %s seq %d; want applied anew after %d", again.Status, again.CommitSeq, young.CommitSeq)
				}
				if r := push("young", "first"); r.Status != wire.PushCached || r.CommitSeq != young.CommitSeq {
					t.Fatalf("retry of young after the prune: %s seq %d; want cached %d", r.Status, r.CommitSeq, young.CommitSeq)
				}
				if max := e.partitionState().MaxCommitSeq; max != again.CommitSeq {
					t.Fatalf("MaxCommitSeq %d; want %d (old applied twice, young once)", max, again.CommitSeq)
				}
			})
		}
	})
}
