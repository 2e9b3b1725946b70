package syncgo_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/klauspost/compress/gzip"
	"github.com/klauspost/compress/zstd"

	"github.com/syncgo/syncgo/internal/sspclient"
	"github.com/syncgo/syncgo/pgstore"
	"github.com/syncgo/syncgo/sqlitestore"
	"github.com/syncgo/syncgo/store"
	"github.com/syncgo/syncgo/wire"
)

// captured is one /sync response as it came over the wire.
type captured struct {
	encoding string
	body     []byte
}

// captureTransport records every /sync response body as sent (still in
// its content coding) and hands the client a copy.
type captureTransport struct {
	mu   sync.Mutex
	resp []captured
}

func (c *captureTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	resp, err := http.DefaultTransport.RoundTrip(r)
	if err != nil || !strings.HasSuffix(r.URL.Path, "/sync") {
		return resp, err
	}
	b, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	c.resp = append(c.resp, captured{encoding: resp.Header.Get("Content-Encoding"), body: b})
	c.mu.Unlock()
	resp.Body = io.NopCloser(bytes.NewReader(b))
	return resp, nil
}

func (c *captureTransport) take() []captured {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := c.resp
	c.resp = nil
	return out
}

// decoded returns a response body without its content coding.
func decoded(t *testing.T, c captured) []byte {
	t.Helper()
	switch c.encoding {
	case "":
		return c.body
	case "zstd":
		d, err := zstd.NewReader(bytes.NewReader(c.body))
		if err != nil {
			t.Fatal(err)
		}
		defer d.Close()
		b, err := io.ReadAll(d)
		if err != nil {
			t.Fatalf("zstd body: %v", err)
		}
		return b
	case "gzip":
		d, err := gzip.NewReader(bytes.NewReader(c.body))
		if err != nil {
			t.Fatal(err)
		}
		b, err := io.ReadAll(d)
		if err != nil {
			t.Fatalf("gzip body: %v", err)
		}
		return b
	}
	t.Fatalf("content coding %q", c.encoding)
	return nil
}

// preCounts returns the read-ahead counters of used windows and of those
// answered with their body compressed ahead.
func preCounts(t *testing.T, e *metricsEnv) (used, pre float64) {
	t.Helper()
	s := e.scrape()
	return s.must(t, "syncgo_pull_read_ahead_total", "result", "used"), s.must(t, "syncgo_pull_read_ahead_total", "result", "precompressed")
}

// longTitle makes a commit's frame a few hundred bytes, so that a window
// of ten is a response the server compresses.
func longTitle(i int) string { return fmt.Sprintf("task %d ", i) + strings.Repeat("lorem ipsum ", 20) }

// A catch-up in windows of 10 commits by a zstd client: every window read
// ahead is answered with the body compressed while it was read, and that
// body decodes to exactly the bytes an identity client (never
// precompressed) gets for the same windows, round by round; the replica
// ends equal to the server.
func TestE2EReadAheadPrecompressed(t *testing.T) {
	forEachDriver(t, func(t *testing.T, d e2eDriver) {
		e := newMetricsEnv(t, d)
		w := e.client("writer", sspclient.Options{})
		zt, it := &captureTransport{}, &captureTransport{}
		z := e.client("reader", sspclient.Options{LimitCommits: 10, AcceptEncoding: "zstd", HTTPClient: &http.Client{Transport: zt}})
		id := e.client("reader", sspclient.Options{LimitCommits: 10, AcceptEncoding: "identity", HTTPClient: &http.Client{Transport: it}})
		for _, c := range []*sspclient.Client{w, z, id} {
			mustSubscribe(t, c, "tasks-p1", "p1")
			syncQuiet(t, c)
		}
		for i := range 45 {
			mustUpsert(t, w, taskRow(fmt.Sprintf("t%03d", i), "p1", longTitle(i)))
			if _, err := w.Sync(context.Background()); err != nil {
				t.Fatal(err)
			}
		}
		zt.take()
		it.take()

		catchUp := func(c *sspclient.Client) {
			t.Helper()
			for round := 0; ; round++ {
				res, err := c.Round(context.Background())
				if err != nil {
					t.Fatal(err)
				}
				if sectionOf(t, res, "tasks-p1").Commits == 0 {
					return
				}
				if round > 10 {
					t.Fatal("no end")
				}
			}
		}
		catchUp(z)
		used, pre := preCounts(t, e)
		// Windows 2-5 were read ahead (window 1 by the request, the
		// last round is empty).
		if used != 4 || pre != 4 {
			t.Fatalf("zstd catch-up: %v windows read ahead used, %v precompressed; want 4 and 4", used, pre)
		}
		catchUp(id)
		used2, pre2 := preCounts(t, e)
		if used2 != used+4 || pre2 != pre {
			t.Fatalf("identity catch-up: used %v -> %v, precompressed %v -> %v; want 4 more used, none precompressed", used, used2, pre, pre2)
		}

		zr, ir := zt.take(), it.take()
		if len(zr) != 6 || len(ir) != 6 {
			t.Fatalf("%d zstd and %d identity responses, want 6 each", len(zr), len(ir))
		}
		for i := range zr {
			if ir[i].encoding != "" || (i < 5 && zr[i].encoding != "zstd") {
				t.Fatalf("round %d: codings %q and %q", i, zr[i].encoding, ir[i].encoding)
			}
			if got, want := decoded(t, zr[i]), ir[i].body; !bytes.Equal(got, want) {
				t.Fatalf("round %d: the zstd response decodes to %d bytes that differ from the identity response's %d", i, len(got), len(want))
			}
			m, err := wire.DecodeMessage(ir[i].body, wire.DecoderOptions{Kind: wire.KindResponse})
			if err != nil {
				t.Fatalf("round %d: %v", i, err)
			}
			n := 0
			for _, f := range m.Frames {
				if _, ok := f.(*wire.Commit); ok {
					n++
				}
			}
			if want := []int{10, 10, 10, 10, 5, 0}[i]; n != want {
				t.Fatalf("round %d: %d commits, want %d", i, n, want)
			}
		}
		sameRows(t, "zstd reader", clientRows(t, z, "tasks"), e.serverRows("tasks"))
		sameRows(t, "identity reader", clientRows(t, id, "tasks"), e.serverRows("tasks"))
	})
}

// A body compressed ahead is used only by a request whose own frames
// around the window are the body's and whose response goes out in the
// body's coding: a request that renames its subscription, or that asks
// for another coding, or that follows a request of another coding, gets
// the window encoded for it (right id, decodable), and the next request
// that repeats its predecessor gets the body.
func TestE2EReadAheadPrecompressedChecks(t *testing.T) {
	forEachDriver(t, func(t *testing.T, d e2eDriver) {
		e := newMetricsEnv(t, d)
		w := e.client("writer", sspclient.Options{})
		mustSubscribe(t, w, "tasks-p1", "p1")
		syncQuiet(t, w)
		for i := range 90 {
			mustUpsert(t, w, taskRow(fmt.Sprintf("t%03d", i), "p1", longTitle(i)))
			if _, err := w.Sync(context.Background()); err != nil {
				t.Fatal(err)
			}
		}
		epoch := e.partitionState().LogEpoch

		// pull sends a catch-up request for subscription sub from cursor
		// in coding enc and returns the section's id, commits and next
		// cursor.
		pull := func(sub string, cursor int64, enc string) (string, int, int64) {
			t.Helper()
			req := &wire.Request{Version: 3, Header: &wire.ReqHeader{ClientID: "raw", SchemaVersion: 1, LogEpoch: &epoch},
				Pull: &wire.PullHeader{Accept: 3, LimitCommits: 10}, Subscriptions: []*wire.Subscription{{ID: sub, Table: "tasks",
					Scopes: wire.ScopeMap{{Key: "project_id", Values: []string{"p1"}}}, Cursor: cursor}}}
			r := e.post(t, bytes.NewReader(encodeRequest(t, req)), map[string]string{"Accept-Encoding": enc})
			if r.status != http.StatusOK || r.header.Get("Content-Encoding") != enc {
				t.Fatalf("HTTP %d coded %q, want 200 coded %q", r.status, r.header.Get("Content-Encoding"), enc)
			}
			r.body = decoded(t, captured{encoding: enc, body: r.body})
			m := decodeResponse(t, r)
			var (
				id   string
				n    int
				next int64 = -1
			)
			for _, f := range m.Frames {
				switch f := f.(type) {
				case *wire.SubStart:
					id = f.ID
				case *wire.Commit:
					if f.CommitSeq != cursor+int64(n)+1 {
						t.Fatalf("commit %d after cursor %d and %d commits", f.CommitSeq, cursor, n)
					}
					n++
				case *wire.SubEnd:
					next = f.NextCursor
				case *wire.ErrorFrame:
					t.Fatalf("ERROR %s", f.Code)
				}
			}
			return id, n, next
		}
		base := e.partitionState().MaxCommitSeq - 90
		// A body is built for the request before the one that takes
		// it: a request that changes the shape does not get it, the next
		// one that repeats it does.
		steps := []struct {
			sub, enc string
			pre      bool // answered with the body compressed ahead
		}{
			{"s1", "zstd", false}, // the first window: read by the request
			{"s2", "zstd", false}, // another subscription id than the body's
			{"s2", "zstd", true},
			{"s2", "gzip", false}, // the body is zstd
			{"s2", "zstd", false}, // the body is gzip
			{"s2", "zstd", true},
			{"s2", "gzip", false},
			{"s2", "gzip", true}, // a gzip body
			{"s2", "zstd", false},
		}
		cursor := base
		for i, s := range steps {
			_, pre0 := preCounts(t, e)
			id, n, next := pull(s.sub, cursor, s.enc)
			_, pre1 := preCounts(t, e)
			if id != s.sub || n != 10 || next != cursor+10 {
				t.Fatalf("step %d: section %q with %d commits to %d; want %q with 10 to %d", i, id, n, next, s.sub, cursor+10)
			}
			if (pre1 > pre0) != s.pre {
				t.Fatalf("step %d: precompressed %v -> %v, want precompressed %v", i, pre0, pre1, s.pre)
			}
			cursor = next
		}
	})
}

// errClientWrite is the failure of a client record write, injected.
var errClientWrite = errors.New("client record write failed (injected)")

// failingClientSQLite and failingClientPostgres fail every client record
// write while fail is set.
type failingClientSQLite struct {
	*sqlitestore.Store
	fail *atomic.Bool
}

func (s *failingClientSQLite) DeferClient(ctx context.Context, partition, epoch string, rec store.ClientRecord, base int64) error {
	if s.fail.Load() {
		return errClientWrite
	}
	return s.Store.DeferClient(ctx, partition, epoch, rec, base)
}

func (s *failingClientSQLite) PutClient(ctx context.Context, partition string, rec store.ClientRecord) error {
	if s.fail.Load() {
		return errClientWrite
	}
	return s.Store.PutClient(ctx, partition, rec)
}

type failingClientPostgres struct {
	*pgstore.Store
	fail *atomic.Bool
}

func (s *failingClientPostgres) DeferClient(ctx context.Context, partition, epoch string, rec store.ClientRecord, base int64) error {
	if s.fail.Load() {
		return errClientWrite
	}
	return s.Store.DeferClient(ctx, partition, epoch, rec, base)
}

func (s *failingClientPostgres) PutClient(ctx context.Context, partition string, rec store.ClientRecord) error {
	if s.fail.Load() {
		return errClientWrite
	}
	return s.Store.PutClient(ctx, partition, rec)
}

// A request that chose the body compressed ahead and then failed to save
// its client record sends none of it: the client gets an error, applies
// nothing of the window, and its retry catches up to a replica equal to
// the server's.
func TestE2EReadAheadPrecompressedSaveFails(t *testing.T) {
	forEachDriver(t, func(t *testing.T, d e2eDriver) {
		fail := &atomic.Bool{}
		fd := e2eDriver{name: d.name, open: func(t *testing.T) store.Store {
			switch s := d.open(t).(type) {
			case *sqlitestore.Store:
				return &failingClientSQLite{Store: s, fail: fail}
			case *pgstore.Store:
				return &failingClientPostgres{Store: s, fail: fail}
			default:
				t.Fatalf("no hooks for %T", s)
				return nil
			}
		}}
		e := newMetricsEnv(t, fd)
		w := e.client("writer", sspclient.Options{})
		z := e.client("reader", sspclient.Options{LimitCommits: 10, AcceptEncoding: "zstd"})
		for _, c := range []*sspclient.Client{w, z} {
			mustSubscribe(t, c, "tasks-p1", "p1")
			syncQuiet(t, c)
		}
		for i := range 45 {
			mustUpsert(t, w, taskRow(fmt.Sprintf("t%03d", i), "p1", longTitle(i)))
			if _, err := w.Sync(context.Background()); err != nil {
				t.Fatal(err)
			}
		}
		ctx := context.Background()
		for range 2 {
			if _, err := z.Round(ctx); err != nil {
				t.Fatal(err)
			}
		}
		if n := len(clientRows(t, z, "tasks")); n != 20 {
			t.Fatalf("%d rows after two windows, want 20", n)
		}
		_, pre0 := preCounts(t, e)
		fail.Store(true)
		if _, err := z.Round(ctx); err == nil {
			t.Fatal("the round whose client record failed succeeded")
		}
		fail.Store(false)
		if _, pre1 := preCounts(t, e); pre1 != pre0+1 {
			t.Fatalf("precompressed %v -> %v: the failed round did not choose the body", pre0, pre1)
		}
		if n := len(clientRows(t, z, "tasks")); n != 20 {
			t.Fatalf("%d rows after the failed round, want 20", n)
		}
		for round := 0; ; round++ {
			res, err := z.Round(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if sectionOf(t, res, "tasks-p1").Commits == 0 {
				break
			}
			if round > 10 {
				t.Fatal("no end")
			}
		}
		sameRows(t, "reader", clientRows(t, z, "tasks"), e.serverRows("tasks"))
	})
}
