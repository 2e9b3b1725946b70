package sqlitestore

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/syncgo/syncgo/store"
	"github.com/syncgo/syncgo/store/storetest"
	"github.com/syncgo/syncgo/wire"
)

// BenchmarkPushWrite measures the writer's side of one pushed one-row
// commit, the statements the engine runs for a new row (internal/engine
// applyCommit): the serve gate and the push-result lookup, then in the
// commit's candidate the row and tombstone reads, the row upsert, the log
// append and the push result. writers=64 is the push+pull rounds
// workload's concurrency; with fewer writers the batches are smaller and
// each commit carries more of its batch's cost (BEGIN, the WAL write of
// the pages every commit touches, fsync, checkpoints). It reports the
// process's CPU and the statements the writer's connection ran per
// commit (the batch's BEGIN and COMMIT included) beside ns/op.
//
//	go test -run '^$' -bench BenchmarkPushWrite -count 5 ./sqlitestore
func BenchmarkPushWrite(b *testing.B) { benchPush(b, 0) }

// BenchmarkPushUpdate is BenchmarkPushWrite with commits that update
// rows already stored (in the same scope), the common write of an app:
// 4,096 rows, updated in turn.
func BenchmarkPushUpdate(b *testing.B) { benchPush(b, 4096) }

// benchPush runs BenchmarkPushWrite (stored 0: every commit a new row) or
// BenchmarkPushUpdate (commits updating stored rows in turn).
func benchPush(b *testing.B, stored int64) {
	for _, c := range []struct {
		writers  int
		noBuffer bool
	}{{1, false}, {16, false}, {64, false}, {64, true}} {
		writers, wal := c.writers, "gathered"
		if c.noBuffer {
			wal = "sqlite" // the WAL written as SQLite writes it (walbuf.go)
		}
		b.Run(fmt.Sprintf("writers=%d/wal=%s", writers, wal), func(b *testing.B) {
			s := openConfig(b, Config{Path: filepath.Join(b.TempDir(), "sync.db"), NoWALBuffer: c.noBuffer})
			ctx := b.Context()
			sc := storetest.FixtureSchema(b)
			if err := s.EnsureSchema(ctx, sc); err != nil {
				b.Fatal(err)
			}
			const partition = "bench"
			if _, err := s.TouchPartition(ctx, partition, 1000, "epoch-bench"); err != nil {
				b.Fatal(err)
			}
			// Spread like random row ids, so the row's index entries land
			// on different pages.
			id := func(n int64) string {
				if stored > 0 {
					n %= stored
				}
				return fmt.Sprintf("%016x", uint64(n)*0x9e3779b97f4a7c15)
			}
			fresh := func(n int64) store.RowWrite {
				return storetest.Task{ID: id(n), ProjectID: "p1", Title: ptr("a benchmark row")}.RowWrite(b, 1)
			}
			row := fresh
			if stored > 0 {
				row = func(n int64) store.RowWrite {
					return storetest.Task{ID: id(n), ProjectID: "p1", Title: ptr(fmt.Sprintf("update %d", n))}.RowWrite(b, n+1)
				}
			}
			err := s.Write(ctx, partition, func(ctx context.Context, tx store.WriteTx) error {
				for n := range stored {
					if err := tx.UpsertRow(ctx, fresh(n)); err != nil {
						return err
					}
				}
				return nil
			})
			if err != nil {
				b.Fatal(err)
			}
			var (
				next atomic.Int64
				wg   sync.WaitGroup
			)
			before, batches, cpu0 := s.w.c.statements, s.stats.batches.Load(), processCPU(b)
			b.ResetTimer()
			start := time.Now()
			for w := range writers {
				clientID := fmt.Sprintf("client-%d", w)
				wg.Go(func() {
					for {
						n := next.Add(1)
						if n > int64(b.N) {
							return
						}
						if err := pushRow(ctx, s.Store, partition, clientID, fmt.Sprintf("c%d", n), row(n), stored > 0, sc.Version()); err != nil {
							b.Error(err)
							return
						}
					}
				})
			}
			wg.Wait()
			elapsed := time.Since(start)
			b.StopTimer()
			b.ReportMetric(float64(processCPU(b)-cpu0)/float64(b.N)/1e3, "cpu-µs/commit")
			b.ReportMetric(float64(s.w.c.statements-before)/float64(b.N), "stmts/commit")
			b.ReportMetric(float64(b.N)/float64(s.stats.batches.Load()-batches), "commits/batch")
			b.ReportMetric(float64(b.N)/elapsed.Seconds(), "commits/s")
		})
	}
}

// processCPU is the process's CPU time so far (user and system), in ns:
// a benchmark's CPU per operation, which a loaded machine changes less
// than its wall time.
func processCPU(b *testing.B) int64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return ru.Utime.Nano() + ru.Stime.Nano()
}

func ptr[T any](v T) *T { return &v }

// pushNewRow is what the engine does under the write boundary for a
// pushed commit inserting one new row.
func pushNewRow(ctx context.Context, s *Store, partition, clientID, commitID string, r store.RowWrite, running int32) error {
	return pushRow(ctx, s, partition, clientID, commitID, r, false, running)
}

// pushRow is what the engine does under the write boundary for a pushed
// commit writing one row, new or (stored) already there.
func pushRow(ctx context.Context, s *Store, partition, clientID, commitID string, r store.RowWrite, stored bool, running int32) error {
	return s.Write(ctx, partition, func(ctx context.Context, tx store.WriteTx) error {
		if _, err := tx.(store.BarrierTx).ServeGate(ctx, running); err != nil {
			return err
		}
		if _, err := tx.PushResult(ctx, clientID, commitID); !errors.Is(err, store.ErrNotFound) {
			return fmt.Errorf("push result: %v", err)
		}
		return tx.Candidate(ctx, func(ctx context.Context) error {
			_, err := tx.Row(ctx, r.Table, r.RowID)
			if stored != (err == nil) || (err != nil && !errors.Is(err, store.ErrNotFound)) {
				return fmt.Errorf("row (stored %v): %v", stored, err)
			}
			if !stored { // a new row: a tombstone would be cleared
				if _, ok, err := tx.Tombstone(ctx, r.Table, r.RowID); err != nil || ok {
					return fmt.Errorf("tombstone: %v %v", ok, err)
				}
			}
			if err := tx.UpsertRow(ctx, r); err != nil {
				return err
			}
			seq, err := tx.AppendCommit(ctx, store.NewCommit{ClientID: clientID, ClientCommitID: commitID, ActorID: "actor",
				CreatedAtMs: 1000, Changes: []store.Change{storetest.UpsertChange(r)}})
			if err != nil {
				return err
			}
			_, err = tx.PutPushResult(ctx, clientID, commitID, store.PushRecord{Status: wire.PushApplied, CommitSeq: seq,
				RecordedAtMs: 1000, CacheIdentity: "x", ActorID: "actor", Results: []wire.OpResult{{Status: wire.OpApplied}}})
			return err
		})
	})
}
