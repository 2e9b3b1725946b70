package pgstore

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/syncgo/syncgo/store"
	"github.com/syncgo/syncgo/store/storetest"
	"github.com/syncgo/syncgo/wire"
)

// roundTrips counts the round trips of a pool's connections: every
// query, exec and pipelined batch is one (a batch that prepares new
// statements costs one more, which only the first uses of a statement on
// a connection pay).
type roundTrips struct{ n atomic.Int64 }

func (c *roundTrips) TraceQueryStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceQueryStartData) context.Context {
	c.n.Add(1)
	return ctx
}
func (c *roundTrips) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}
func (c *roundTrips) TraceBatchStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceBatchStartData) context.Context {
	c.n.Add(1)
	return ctx
}
func (c *roundTrips) TraceBatchQuery(context.Context, *pgx.Conn, pgx.TraceBatchQueryData) {}
func (c *roundTrips) TraceBatchEnd(context.Context, *pgx.Conn, pgx.TraceBatchEndData)     {}

// openCounted opens a store on a fresh schema whose pool counts its round
// trips.
func openCounted(tb testing.TB, maxConns int32) (*Store, *roundTrips) {
	tb.Helper()
	cfg, err := pgxpool.ParseConfig(testURL(tb))
	if err != nil {
		tb.Fatal(err)
	}
	cfg.ConnConfig.RuntimeParams["search_path"] = newSchema(tb)
	cfg.MaxConns = maxConns
	rt := &roundTrips{}
	cfg.ConnConfig.Tracer = rt
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(pool.Close)
	s, err := Open(context.Background(), Config{Pool: pool})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { _ = s.Close() })
	return s, rt
}

// BenchmarkPushCommit replays what the engine does for a push of one
// commit that inserts one fresh row (internal/engine push.go and
// apply.go): the journal pre-check on the pool (unless the store reads
// ahead, which reads the journal in the transaction), then one Write with the
// serve gate, the journal re-check (with the row, read ahead where the
// driver can: WriteReadAhead), and in a candidate savepoint the row
// read, the tombstone read, the upsert, the append and the push result.
// Writers (1, 8, 64 goroutines pulling iterations from one counter) push
// to one partition, or each to its own. Figures: commits/s and the round
// trips per commit (all the pool's connections, warm statement caches).
func BenchmarkPushCommit(b *testing.B) {
	testURL(b)
	for _, writers := range []int{1, 8, 64} {
		for _, distinct := range []bool{false, true} {
			if distinct && writers == 1 {
				continue
			}
			layout := "same"
			if distinct {
				layout = "distinct"
			}
			b.Run(fmt.Sprintf("writers=%d/partitions=%s", writers, layout), func(b *testing.B) {
				benchPushCommit(b, writers, distinct)
			})
		}
	}
}

func benchPushCommit(b *testing.B, writers int, distinct bool) {
	s, rt := openCounted(b, 16)
	ctx := context.Background()
	sc := storetest.FixtureSchema(b)
	if err := s.EnsureSchema(ctx, sc); err != nil {
		b.Fatal(err)
	}
	partitions := make([]string, writers)
	for w := range writers {
		partitions[w] = "bench"
		if distinct {
			partitions[w] = fmt.Sprintf("bench-%d", w)
		}
		if _, err := s.TouchPartition(ctx, partitions[w], 1000, "epoch"); err != nil {
			b.Fatal(err)
		}
	}
	var next atomic.Int64
	push := func(w int, k int64) error {
		partition := partitions[w]
		clientID, commitID := fmt.Sprintf("client-%d", w), fmt.Sprintf("commit-%d", k)
		ra, readAhead := any(s).(store.ReadAheadWriter)
		if !readAhead {
			if _, err := s.PushResult(ctx, partition, clientID, commitID); !errors.Is(err, store.ErrNotFound) {
				return fmt.Errorf("pre-check: %v", err)
			}
		}
		row := storetest.Task{ID: fmt.Sprintf("w%d-%d", w, k), ProjectID: fmt.Sprintf("project-%d", w)}.RowWrite(b, 1)
		fn := func(ctx context.Context, tx store.WriteTx) error {
			if g, err := tx.(store.BarrierTx).ServeGate(ctx, sc.Version()); err != nil || g.StoredSchemaVersion != sc.Version() {
				return fmt.Errorf("serve gate: %+v, %v", g, err)
			}
			if _, err := tx.PushResult(ctx, clientID, commitID); !errors.Is(err, store.ErrNotFound) {
				return fmt.Errorf("re-check: %v", err)
			}
			return tx.Candidate(ctx, func(ctx context.Context) error {
				if _, err := tx.Row(ctx, row.Table, row.RowID); !errors.Is(err, store.ErrNotFound) {
					return fmt.Errorf("row: %v", err)
				}
				if _, ok, err := tx.Tombstone(ctx, row.Table, row.RowID); ok || err != nil {
					return fmt.Errorf("tombstone: %v, %v", ok, err)
				}
				if err := tx.UpsertRow(ctx, row); err != nil {
					return err
				}
				seq, err := tx.AppendCommit(ctx, store.NewCommit{ClientID: clientID, ClientCommitID: commitID,
					ActorID: "actor", CreatedAtMs: 1000, Changes: []store.Change{storetest.UpsertChange(row)}})
				if err != nil {
					return err
				}
				rec := store.PushRecord{Status: wire.PushApplied, CommitSeq: seq, RecordedAtMs: 1000,
					CacheIdentity: "c", ActorID: "actor", Results: []wire.OpResult{{Status: wire.OpApplied}}}
				_, err = tx.PutPushResult(ctx, clientID, commitID, rec)
				return err
			})
		}
		if readAhead {
			reads := store.WriteReads{ClientID: clientID, ClientCommitID: commitID, Rows: []store.RowKey{{Table: row.Table, RowID: row.RowID}}}
			return ra.WriteReadAhead(ctx, partition, reads, fn)
		}
		return s.Write(ctx, partition, fn)
	}
	// Warm every connection's statement cache.
	for w := range writers {
		if err := push(w, -1-int64(w)); err != nil {
			b.Fatal(err)
		}
	}
	var wg sync.WaitGroup
	before, stats := rt.n.Load(), s.Stats()
	cpu0, cpuOK := backendCPU(b, s)
	b.ResetTimer()
	start := time.Now()
	for w := range writers {
		wg.Go(func() {
			for k := next.Add(1); k <= int64(b.N); k = next.Add(1) {
				if err := push(w, k); err != nil {
					b.Errorf("push: %v", err)
					return
				}
			}
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	b.StopTimer()
	after := s.Stats()
	b.ReportMetric(float64(b.N)/elapsed.Seconds(), "commits/s")
	b.ReportMetric(float64(rt.n.Load()-before)/float64(b.N), "roundtrips/commit")
	if n := after.Batches - stats.Batches; n > 0 {
		b.ReportMetric(float64(b.N)/float64(n), "commits/batch")
	}
	if cpu1, ok := backendCPU(b, s); ok && cpuOK {
		b.ReportMetric(float64((cpu1-cpu0).Microseconds())/float64(b.N), "pg-µs/commit")
	}
}

// backendCPU is the CPU time the database's backends used so far (user and
// system, from /proc): false when they are not processes of this machine
// (a remote database) or cannot be read. Backends that ended are not
// counted: the pool keeps its connections through a run.
func backendCPU(b *testing.B, s *Store) (time.Duration, bool) {
	rows, err := s.pool.Query(context.Background(), `SELECT pid FROM pg_stat_activity WHERE datname = current_database()`)
	if err != nil {
		b.Fatal(err)
	}
	pids, err := pgx.CollectRows(rows, pgx.RowTo[int32])
	if err != nil {
		b.Fatal(err)
	}
	var ticks int64
	for _, pid := range pids {
		raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err != nil {
			return 0, false
		}
		// The fields after the command name: utime and stime are the 12th
		// and 13th (clock ticks of 1/100 s).
		f := strings.Fields(string(raw[bytes.LastIndexByte(raw, ')')+1:]))
		if len(f) < 13 {
			return 0, false
		}
		u, err1 := strconv.ParseInt(f[11], 10, 64)
		st, err2 := strconv.ParseInt(f[12], 10, 64)
		if err1 != nil || err2 != nil {
			return 0, false
		}
		ticks += u + st
	}
	return time.Duration(ticks) * 10 * time.Millisecond, true
}
