package storetest

import (
	"context"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/syncgo/syncgo/store"
	"github.com/syncgo/syncgo/wire"
)

// BenchmarkAppend measures the commit throughput of a store: each commit
// is one Write that upserts ops rows and appends one commit of their ops
// changes. Sub-benchmarks vary ops (1, 10), the number of concurrent
// writers (1, 8, 64: goroutines pulling iterations from a shared counter,
// so the count is exact whatever GOMAXPROCS is) and whether the writers
// share one partition or each has its own. Each reports commits/s.
func BenchmarkAppend(b *testing.B, open Opener) {
	for _, ops := range []int{1, 10} {
		for _, writers := range []int{1, 8, 64} {
			for _, distinct := range []bool{false, true} {
				layout := "same"
				if distinct {
					layout = "distinct"
				}
				b.Run(fmt.Sprintf("ops=%d/writers=%d/partitions=%s", ops, writers, layout), func(b *testing.B) {
					benchAppend(b, open, ops, writers, distinct)
				})
			}
		}
	}
}

func benchAppend(b *testing.B, open Opener, ops, writers int, distinct bool) {
	s := open(b)
	ctx := b.Context()
	if err := s.EnsureSchema(ctx, FixtureSchema(b)); err != nil {
		b.Fatalf("EnsureSchema: %v", err)
	}
	partitions := make([]string, writers)
	rows := make([][]store.RowWrite, writers)
	for w := range writers {
		partitions[w] = "bench"
		if distinct {
			partitions[w] = fmt.Sprintf("bench-%d", w)
		}
		if _, err := s.TouchPartition(ctx, partitions[w], 1000, epochOf(partitions[w])); err != nil {
			b.Fatalf("TouchPartition: %v", err)
		}
		for op := range ops {
			id := fmt.Sprintf("w%d-op%d", w, op)
			rows[w] = append(rows[w], Task{ID: id, ProjectID: "bench", Title: ptr("a benchmark row"), N: ptr(int64(op))}.RowWrite(b, 1))
		}
	}
	var (
		next atomic.Int64
		wg   sync.WaitGroup
	)
	b.ResetTimer()
	start := time.Now()
	for w := range writers {
		wg.Go(func() {
			changes := make([]store.Change, ops)
			for i, r := range rows[w] {
				changes[i] = UpsertChange(r)
			}
			for next.Add(1) <= int64(b.N) {
				err := s.Write(ctx, partitions[w], func(ctx context.Context, tx store.WriteTx) error {
					for _, r := range rows[w] {
						if err := tx.UpsertRow(ctx, r); err != nil {
							return err
						}
					}
					_, err := tx.AppendCommit(ctx, newCommit(changes...))
					return err
				})
				if err != nil {
					b.Errorf("Write: %v", err)
					return
				}
			}
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	b.StopTimer()
	b.ReportMetric(float64(b.N)/elapsed.Seconds(), "commits/s")
}

// BenchmarkCommitWindow measures a catch-up read: a window of 1,000
// one-change commits of one scope value, read from the start and from the
// middle of logs of 1k, 10k and 100k commits, and of 1M commits when the
// environment variable SYNCGO_BENCH_WINDOW_1M is set (the 1M log takes a
// while to build). The cost per window must not grow with the log (ns/op
// flat across log sizes).
//
// The first 10,000 commits are written through the store (Write, 500 per
// transaction); a longer log is built from them by copying the log's rows
// in SQL (extendLog) when the store is a RawExecer, else written too.
// benchPartition opens a store with the fixture schema and the partition
// touched: the start of the benchmarks that read one partition.
func benchPartition(b *testing.B, open Opener, partition string) store.Store {
	b.Helper()
	s := open(b)
	if err := s.EnsureSchema(b.Context(), FixtureSchema(b)); err != nil {
		b.Fatalf("EnsureSchema: %v", err)
	}
	if _, err := s.TouchPartition(b.Context(), partition, 1000, epochOf(partition)); err != nil {
		b.Fatalf("TouchPartition: %v", err)
	}
	return s
}

func BenchmarkCommitWindow(b *testing.B, open Opener) {
	sizes := []int{1_000, 10_000, 100_000}
	if os.Getenv("SYNCGO_BENCH_WINDOW_1M") != "" {
		sizes = append(sizes, 1_000_000)
	}
	for _, size := range sizes {
		b.Run(fmt.Sprintf("log=%d", size), func(b *testing.B) {
			const partition = "bench"
			s := benchPartition(b, open, partition)
			ctx := b.Context()
			written := size
			rx, bulk := s.(RawExecer)
			if bulk {
				written = min(size, 10_000)
			}
			const perWrite = 500
			for done := 0; done < written; done += perWrite {
				err := s.Write(ctx, partition, func(ctx context.Context, tx store.WriteTx) error {
					for i := done; i < min(done+perWrite, written); i++ {
						r := Task{ID: fmt.Sprintf("r%07d", i), ProjectID: "bench", Title: ptr("a benchmark row")}.RowWrite(b, 1)
						if err := tx.UpsertRow(ctx, r); err != nil {
							return err
						}
						if _, err := tx.AppendCommit(ctx, newCommit(UpsertChange(r))); err != nil {
							return err
						}
					}
					return nil
				})
				if err != nil {
					b.Fatalf("seed: %v", err)
				}
			}
			if written < size {
				if err := extendLog(ctx, rx, partition, int64(written), int64(size)); err != nil {
					b.Fatalf("extend the log: %v", err)
				}
			}
			// middle-bulk is middle read as a catch-up's read-ahead reads
			// it (Bulk: the window after a full one).
			for _, from := range []struct {
				name  string
				after int64
				bulk  bool
			}{{"start", 0, false}, {"middle", int64(size / 2), false}, {"middle-bulk", int64(size / 2), true}} {
				b.Run(from.name, func(b *testing.B) {
					q := store.CommitWindowQuery{Table: TableTasks, Scopes: projectScope("bench"),
						AfterSeq: from.after, ThroughSeq: int64(size), LimitChanges: 1000, Bulk: from.bulk}
					want := min(1000, int64(size)-from.after)
					for b.Loop() {
						w, err := s.ReadCommitWindow(ctx, partition, q)
						if err != nil || int64(len(w.Commits)) != want || w.Commits[want-1].Seq != from.after+want {
							b.Fatalf("ReadCommitWindow = %d commits, %v", len(w.Commits), err)
						}
						if w.Release != nil {
							w.Release() // as the engine does once the window is encoded
						}
					}
				})
			}
		})
	}
}

// extendLog grows a partition's dense log of commits 1..n to 1..size by
// copying its rows in SQL, doubling it per pass: commit k+m is commit k
// again (its changes, their scope index entries; row and client commit
// ids suffixed). The statements are the same on SQLite and Postgres.
func extendLog(ctx context.Context, rx RawExecer, partition string, n, size int64) error {
	for m := n; m < size; {
		k := min(m, size-m)
		script := fmt.Sprintf(`INSERT INTO sync_commits(partition, commit_seq, client_id, client_commit_id, actor_id, created_at_ms, writer_version)
 SELECT partition, commit_seq + %[2]d, client_id, client_commit_id || '+%[2]d', actor_id, created_at_ms, writer_version
   FROM sync_commits WHERE partition = '%[1]s' AND commit_seq <= %[3]d;
INSERT INTO sync_changes(partition, commit_seq, idx, tbl, row_id, op, row_version, scopes, payload)
 SELECT partition, commit_seq + %[2]d, idx, tbl, row_id || '+%[2]d', op, row_version, scopes, payload
   FROM sync_changes WHERE partition = '%[1]s' AND commit_seq <= %[3]d;
INSERT INTO sync_change_scopes(partition, tbl, var, value, commit_seq)
 SELECT partition, tbl, var, value, commit_seq + %[2]d
   FROM sync_change_scopes WHERE partition = '%[1]s' AND commit_seq <= %[3]d;
UPDATE sync_partitions SET max_commit_seq = %[4]d WHERE partition = '%[1]s'`, partition, m, k, m+k)
		if err := rx.ExecRaw(ctx, script); err != nil {
			return err
		}
		m += k
	}
	return nil
}

// BenchmarkScanPages reads a bootstrap of 20,000 rows in one scope in
// pages of 2,000 (ScanRows with NoScopes, one page after another), and
// walks its page boundaries (PageBoundaries). The row ids are unpadded
// ("r0", "r1", ..., "r19999"), so their bytewise order is not the order
// they were written in, as with random ids.
func BenchmarkScanPages(b *testing.B, open Opener) {
	const rows, limit = 20_000, 2_000
	const partition = "bench"
	s := benchPartition(b, open, partition)
	ctx := b.Context()
	const perWrite = 500
	for done := 0; done < rows; done += perWrite {
		err := s.Write(ctx, partition, func(ctx context.Context, tx store.WriteTx) error {
			for i := done; i < done+perWrite; i++ {
				r := Task{ID: fmt.Sprintf("r%d", i), ProjectID: "bench", Title: ptr("a benchmark row of some length")}.RowWrite(b, 1)
				if err := tx.UpsertRow(ctx, r); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			b.Fatalf("seed: %v", err)
		}
	}
	b.Run("ScanRows", func(b *testing.B) {
		for b.Loop() {
			n := 0
			q := store.RowScanQuery{Table: TableTasks, Scopes: projectScope("bench"), Limit: limit + 1, NoScopes: true}
			for {
				page, err := s.ScanRows(ctx, partition, q)
				if err != nil {
					b.Fatalf("ScanRows: %v", err)
				}
				if len(page) <= limit {
					n += len(page)
					break
				}
				n += limit
				q.After = &page[limit-1].RowID
			}
			if n != rows {
				b.Fatalf("scanned %d rows, want %d", n, rows)
			}
		}
	})
	b.Run("PageBoundaries", func(b *testing.B) {
		for b.Loop() {
			got, err := s.PageBoundaries(ctx, partition, store.RowScanQuery{Table: TableTasks, Scopes: projectScope("bench"), Limit: limit}, 50)
			if err != nil || len(got) != rows/limit-1 {
				b.Fatalf("PageBoundaries = %d boundaries, %v; want %d", len(got), err, rows/limit-1)
			}
		}
	})
	// How soon the first boundary is known, the latency a bootstrap plan
	// waits before its second page starts: found by the walk
	// (store.BoundaryWalker), or at the end of PageBoundaries without one.
	b.Run("FirstBoundary", func(b *testing.B) {
		w, ok := s.(store.BoundaryWalker)
		var (
			first time.Duration
			iters int
		)
		for b.Loop() {
			iters++
			q := store.RowScanQuery{Table: TableTasks, Scopes: projectScope("bench"), Limit: limit}
			start, n := time.Now(), 0
			if !ok {
				got, err := s.PageBoundaries(ctx, partition, q, 50)
				if err != nil || len(got) == 0 {
					b.Fatalf("PageBoundaries = %d boundaries, %v", len(got), err)
				}
				first += time.Since(start)
				continue
			}
			err := w.WalkPageBoundaries(ctx, partition, q, 50, func(string) {
				if n == 0 {
					first += time.Since(start)
				}
				n++
			})
			if err != nil || n != rows/limit-1 {
				b.Fatalf("WalkPageBoundaries = %d boundaries, %v; want %d", n, err, rows/limit-1)
			}
		}
		b.ReportMetric(float64(first.Microseconds())/float64(iters), "µs/first")
	})
	// The row test of a catch-up far behind (engine/catchup.go): are
	// there more than 10,000 rows? One page of 10,000 and the row after.
	b.Run("CatchUpRowBound", func(b *testing.B) {
		c, ok := s.(store.ScopeRowCounter)
		for b.Loop() {
			if ok {
				n, err := c.CountScopeRows(ctx, partition, TableTasks, projectScope("bench")[0], 10_001)
				if err != nil || n != 10_001 {
					b.Fatalf("CountScopeRows = %d, %v; want 10001", n, err)
				}
				continue
			}
			got, err := s.PageBoundaries(ctx, partition, store.RowScanQuery{Table: TableTasks, Scopes: projectScope("bench"),
				Limit: 10_000, NoScopes: true}, 1)
			if err != nil || len(got) != 1 {
				b.Fatalf("PageBoundaries = %d boundaries, %v; want 1", len(got), err)
			}
		}
	})
}

// BenchmarkPushResultsPrune measures one journal prune batch of 2,000
// rows (the engine's batch) on a journal of 20,000 records none of which
// is old enough to delete, so that the batch is all reading: mode=explicit
// is PrunePushResults from a caller's position, mode=resume is
// ResumePushResultsPrune, which also reads and stores the position in
// the database. Each iteration is one batch, walking the journal in
// laps. Reports rows/s examined.
func BenchmarkPushResultsPrune(b *testing.B, open Opener) {
	const rows, batch = 20_000, 2_000
	s := open(b)
	ctx := b.Context()
	pr, ok := s.(store.PushResultPruner)
	if !ok {
		b.Skip("the store does not prune the push-result journal")
	}
	if err := s.EnsureSchema(ctx, FixtureSchema(b)); err != nil {
		b.Fatal(err)
	}
	if _, err := s.TouchPartition(ctx, "p1", 1000, epochOf("p1")); err != nil {
		b.Fatal(err)
	}
	for from := 0; from < rows; from += 5_000 {
		err := s.Write(ctx, "p1", func(ctx context.Context, tx store.WriteTx) error {
			for i := from; i < from+5_000; i++ {
				rec := store.PushRecord{Status: wire.PushApplied, CommitSeq: int64(i + 1), RecordedAtMs: 1_000_000, CacheIdentity: "0123456789abcdef",
					ActorID: "alice", Results: []wire.OpResult{{OpIndex: 0, Status: wire.OpApplied}}}
				if _, err := tx.PutPushResult(ctx, fmt.Sprintf("client-%05d-0000-4000-8000-000000000000", i/100),
					fmt.Sprintf("%08x-0000-4000-8000-000000000000", i), rec); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			b.Fatal(err)
		}
	}
	for _, resume := range []bool{false, true} {
		mode := "explicit"
		if resume {
			mode = "resume"
		}
		b.Run("mode="+mode, func(b *testing.B) {
			var (
				after    *store.PushResultKey
				examined int64
			)
			for b.Loop() {
				var (
					res store.PushResultPrune
					err error
				)
				if resume {
					res, err = pr.ResumePushResultsPrune(ctx, after, 1000, batch)
				} else {
					res, err = pr.PrunePushResults(ctx, after, 1000, batch)
				}
				if err != nil || res.Deleted != 0 {
					b.Fatalf("batch: %+v, %v", res, err)
				}
				examined += res.Examined
				after = nil
				if !res.Done {
					last := res.Last
					after = &last
				}
			}
			b.ReportMetric(float64(examined)/b.Elapsed().Seconds(), "rows/s")
		})
	}
}
