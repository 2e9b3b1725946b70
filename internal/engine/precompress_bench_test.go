package engine

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"path/filepath"
	"sync"
	"testing"

	"github.com/klauspost/compress/zstd"

	"github.com/syncgo/syncgo/schema"
	"github.com/syncgo/syncgo/sqlitestore"
	"github.com/syncgo/syncgo/store"
	"github.com/syncgo/syncgo/store/storetest"
	"github.com/syncgo/syncgo/wire"
)

// zstdResponder is a BodyResponder that compresses a response as the
// HTTP transport does (the server's zstd settings) and drops the bytes.
type zstdResponder struct {
	zw      *zstd.Encoder
	out     countWriter
	encoded bool
}

type countWriter struct{ n int }

func (c *countWriter) Write(p []byte) (int, error) { c.n += len(p); return len(p), nil }

func newZstd(tb testing.TB) *zstd.Encoder {
	tb.Helper()
	zw, err := zstd.NewWriter(io.Discard, zstd.WithEncoderLevel(zstd.SpeedFastest),
		zstd.WithEncoderConcurrency(1), zstd.WithLowerEncoderMem(true), zstd.WithWindowSize(256<<10))
	if err != nil {
		tb.Fatal(err)
	}
	return zw
}

func (z *zstdResponder) Begin(version uint16) (*wire.Encoder, error) {
	w, _ := z.BeginStream(version)
	return wire.NewEncoder(w, wire.KindResponse, version)
}

func (z *zstdResponder) BeginStream(uint16) (io.Writer, error) {
	z.zw.Reset(&z.out)
	return z.zw, nil
}

func (z *zstdResponder) BodyEncoding() string { return "zstd" }

func (z *zstdResponder) BeginEncoded(uint16) (io.Writer, error) {
	z.encoded = true
	return &z.out, nil
}

// finish ends the compressed stream of a response that was not sent
// coded.
func (z *zstdResponder) finish() error {
	if z.encoded {
		return nil
	}
	return z.zw.Close()
}

// zstdCompressor is a CompressBody with the server's zstd settings.
func zstdCompressor(tb testing.TB) func(string, []byte) ([]byte, bool) {
	var mu sync.Mutex
	zw := newZstd(tb)
	return func(enc string, raw []byte) ([]byte, bool) {
		mu.Lock()
		defer mu.Unlock()
		var buf bytes.Buffer
		zw.Reset(&buf)
		if _, err := zw.Write(raw); err != nil || zw.Close() != nil {
			return nil, false
		}
		return buf.Bytes(), true
	}
}

// seedCatchUpLog opens a sqlitestore with commits one-upsert commits of a
// tasks table in scope project-1 of partition p, like the bench tool's
// catch-up log.
func seedCatchUpLog(b *testing.B, commits int) (*sqlitestore.Store, *schema.Compiled) {
	b.Helper()
	ctx := context.Background()
	sc, err := schema.New(1).Table("tasks", "id",
		schema.String("id"), schema.String("project_id"), schema.String("title").Null(), schema.Boolean("done")).
		Scope("project:{project_id}").Compile()
	if err != nil {
		b.Fatal(err)
	}
	st, err := sqlitestore.Open(ctx, sqlitestore.Config{Path: filepath.Join(b.TempDir(), "sync.db"), Synchronous: "OFF"})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { st.Close() })
	if err := st.EnsureSchema(ctx, sc); err != nil {
		b.Fatal(err)
	}
	if _, err := st.TouchPartition(ctx, "p", 1, "epoch"); err != nil {
		b.Fatal(err)
	}
	for from := 0; from < commits; from += 500 {
		err := st.Write(ctx, "p", func(ctx context.Context, tx store.WriteTx) error {
			for i := from; i < min(from+500, commits); i++ {
				w := storetest.NewRowWrite(b, sc, "tasks", []wire.Value{
					{Str: fmt.Sprintf("task-%08d", i)}, {Str: "project-1"}, {Str: fmt.Sprintf("task %d", i)}, {Bool: i%2 == 0}}, 1)
				if err := tx.UpsertRow(ctx, w); err != nil {
					return err
				}
				if _, err := tx.AppendCommit(ctx, store.NewCommit{ClientID: "w", ClientCommitID: fmt.Sprint(i), ActorID: "a",
					Changes: []store.Change{storetest.UpsertChange(w)}}); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			b.Fatal(err)
		}
	}
	return st, sc
}

// BenchmarkTakenWindow measures a catch-up request for a 1,000-commit
// window that was read ahead (the read finished before the request):
// its entry, taking the window, and its response through a zstd
// transport. encode: the request encodes and compresses the window's
// frames (CompressBody nil, as before precompression); precompressed: it
// checks and writes the body compressed while the window was read ahead.
func BenchmarkTakenWindow(b *testing.B) {
	const commits, limit = 10_000, 1000
	st, sc := seedCatchUpLog(b, commits)
	for _, mode := range []string{"encode", "precompressed"} {
		b.Run(mode, func(b *testing.B) {
			cfg := Config{Store: st, Schema: sc, Resolve: func(context.Context, ScopeRequest) (map[string][]string, error) {
				return map[string][]string{"project_id": {"*"}}, nil
			}}
			if mode == "precompressed" {
				cfg.CompressBody = zstdCompressor(b)
			}
			e := New(cfg)
			b.Cleanup(e.StopReadAhead)
			ctx := context.Background()
			auth := Auth{ActorID: "reader", Partition: "p"}
			epoch := "epoch"
			resp := &zstdResponder{zw: newZstd(b)}
			serve := func(cursor int64) int64 {
				req := &wire.Request{Version: 3, Header: &wire.ReqHeader{ClientID: "bench", SchemaVersion: 1, LogEpoch: &epoch},
					Pull: &wire.PullHeader{Accept: 3, LimitCommits: limit}, Subscriptions: []*wire.Subscription{{ID: "s", Table: "tasks",
						Scopes: wire.ScopeMap{{Key: "project_id", Values: []string{"project-1"}}}, Cursor: cursor}}}
				resp.encoded, resp.out.n = false, 0
				out, err := e.ServeRound(ctx, auth, req, resp)
				if err == nil {
					err = resp.finish()
				}
				if err != nil || !out.Completed {
					b.Fatalf("cursor %d: %v", cursor, err)
				}
				return cursor + limit
			}
			// ready waits for the window read ahead after cursor.
			ready := func() {
				e.ahead.mu.Lock()
				var a *aheadWindow
				if chain := e.ahead.entries[aheadKey{partition: "p", actor: "reader", client: "bench"}]; len(chain) > 0 {
					a = chain[0]
				}
				e.ahead.mu.Unlock()
				if a == nil {
					e.ahead.mu.Lock()
					held, reading := len(e.ahead.entries), e.ahead.reading
					e.ahead.mu.Unlock()
					b.Fatalf("no window read ahead (held %d, reading %d)", held, reading)
				}
				<-a.done
			}
			cursor := int64(commits) // past the end: the next op starts over
			var bytesOut, pre int
			b.ResetTimer()
			for range b.N {
				if cursor+limit >= commits {
					b.StopTimer()
					cursor = serve(0)
					b.StartTimer()
				}
				b.StopTimer()
				ready()
				b.StartTimer()
				cursor = serve(cursor)
				bytesOut += resp.out.n
				if resp.encoded {
					pre++
				}
			}
			b.ReportMetric(float64(bytesOut)/float64(b.N), "resp-bytes/op")
			if (mode == "precompressed") != (pre == b.N) {
				b.Fatalf("%s: %d of %d responses sent coded", mode, pre, b.N)
			}
		})
	}
}
