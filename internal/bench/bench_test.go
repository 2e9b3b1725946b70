package bench

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"reflect"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/syncgo/syncgo"
	"github.com/syncgo/syncgo/schema"
	"github.com/syncgo/syncgo/sqlitestore"
	"github.com/syncgo/syncgo/wire"
)

// newTestServer serves syncgo on a fresh SQLite file with the demo
// schema and the development authentication of syncgo serve.
func newTestServer(t testing.TB) (*httptest.Server, *schema.Compiled) {
	t.Helper()
	hs, sc, _ := newTestServerWrapped(t, nil)
	return hs, sc
}

// newTestServerWith is newTestServer with the server's configuration
// changed by tweak.
func newTestServerWith(t testing.TB, tweak func(*syncgo.Config)) (*httptest.Server, *schema.Compiled) {
	t.Helper()
	hs, sc, _ := newTestServerOf(t, nil, tweak)
	return hs, sc
}

// newTestServerWrapped is newTestServer with the server's handler wrapped
// (nil: as it is); it also returns the server.
func newTestServerWrapped(t testing.TB, wrap func(*syncgo.Server, http.Handler) http.Handler) (*httptest.Server, *schema.Compiled, *syncgo.Server) {
	t.Helper()
	return newTestServerOf(t, wrap, nil)
}

// demoSchema is the demo schema of syncgo serve, compiled.
func demoSchema(t testing.TB) *schema.Compiled {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("..", "cli", "demo_schema.json"))
	if err != nil {
		t.Fatal(err)
	}
	s, err := schema.ParseJSON(data)
	if err != nil {
		t.Fatal(err)
	}
	sc, err := schema.Compile(s)
	if err != nil {
		t.Fatal(err)
	}
	return sc
}

func newTestServerOf(t testing.TB, wrap func(*syncgo.Server, http.Handler) http.Handler, tweak func(*syncgo.Config)) (*httptest.Server, *schema.Compiled, *syncgo.Server) {
	t.Helper()
	sc := demoSchema(t)
	ctx := context.Background()
	st, err := sqlitestore.Open(ctx, sqlitestore.Config{Path: filepath.Join(t.TempDir(), "bench.db")})
	if err != nil {
		t.Fatal(err)
	}
	cfg := syncgo.Config{
		Store:  st,
		Schema: sc,
		Authenticate: func(r *http.Request) (syncgo.Auth, error) {
			token, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
			if !ok || token == "" {
				return syncgo.Auth{}, errors.New("no bearer token")
			}
			return syncgo.Auth{ActorID: token, Partition: "default"}, nil
		},
		ResolveScopes: func(context.Context, syncgo.ScopeRequest) (map[string][]string, error) {
			return map[string][]string{"id": {"*"}, "project_id": {"*"}}, nil
		},
	}
	if tweak != nil {
		tweak(&cfg)
	}
	srv, err := syncgo.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.Start(ctx); err != nil {
		t.Fatal(err)
	}
	var h http.Handler = srv.Handler()
	if wrap != nil {
		h = wrap(srv, h)
	}
	hs := httptest.NewServer(h)
	t.Cleanup(func() {
		hs.CloseClientConnections()
		_ = srv.Stop(context.Background())
		hs.Close()
		_ = st.Close()
	})
	return hs, sc, srv
}

// TestWorkloads runs every workload with tiny parameters and checks that
// it finishes without errors and reports its main figure.
func TestWorkloads(t *testing.T) {
	tests := []struct {
		cfg    Config
		figure string
	}{
		{Config{Workload: "push", Clients: 4, Duration: 300 * time.Millisecond}, "commits/s"},
		{Config{Workload: "push", Clients: 4, Duration: 300 * time.Millisecond, Round: true, Wire: 2}, "rounds/s"},
		{Config{Workload: "catchup", Commits: 1200}, "commits caught up"},
		{Config{Workload: "catchup", Commits: 300, Wire: 1}, "commits/s"},
		{Config{Workload: "catchup", Commits: 2500, RoundDelay: 20 * time.Millisecond}, "commits caught up"},
		{Config{Workload: "bootstrap", Rows: 1500}, "cold rows/s"},
		{Config{Workload: "bootstrap", Rows: 1500, SQLite: true}, "warm rows"},
		{Config{Workload: "fanout", Sockets: 48, Commits: 5}, "deliveries"}, // more sockets per poller than it handles between looks
		// An arena that fills after a few reads: it grows while reads
		// held point into the one before.
		{Config{Workload: "fanout", Sockets: 48, Commits: 5, pollerArena: 17 << 10}, "deliveries"},
		{Config{Workload: "fanout", Sockets: 5, Commits: 5, SocketGoroutines: true}, "deliveries"},
		{Config{Workload: "memory", Sockets: 5, PID: os.Getpid()}, "server RSS with sockets"},
		{Config{Workload: "reconnect", Clients: 5, Commits: 3}, "converged"},
		{Config{Workload: "reconnect", Clients: 5, Commits: 3, PID: os.Getpid()}, "server RSS 60ms after the clients left, HTTP connections closed"},
	}
	for _, tt := range tests {
		t.Run(tt.cfg.Workload, func(t *testing.T) {
			hs, sc := newTestServer(t)
			cfg := tt.cfg
			cfg.URL, cfg.Schema, cfg.Timeout = hs.URL, sc, 10*time.Second
			cfg.settle = 10 * time.Millisecond
			res, err := Run(context.Background(), cfg)
			if err != nil {
				t.Fatal(err)
			}
			if res.Errors != 0 {
				t.Errorf("errors = %d, want 0", res.Errors)
			}
			if tt.cfg.Workload == "fanout" {
				readers, _ := res.Params["socket readers"].(string)
				if wantGoroutines := tt.cfg.SocketGoroutines || runtime.GOOS != "linux"; (readers == "goroutine per socket") != wantGoroutines {
					t.Errorf("socket readers %q, want a goroutine per socket: %v", readers, wantGoroutines)
				}
				if n, _ := res.Figure("deliveries"); n != float64(cfg.Sockets*cfg.Commits) {
					t.Errorf("deliveries %v, want %d", n, cfg.Sockets*cfg.Commits)
				}
			}
			if tt.cfg.Workload == "memory" && runtime.GOOS == "linux" {
				// Measured as it runs (PID): the RSS before the
				// registrations too.
				for _, name := range []string{"KiB per socket, anonymous memory", "KiB per socket, file pages",
					"server RSS before registrations", "KiB per socket, from before registrations"} {
					if _, ok := res.Figure(name); !ok {
						t.Errorf("no figure %q", name)
					}
				}
			}
			if tt.cfg.PID > 0 {
				n := 0
				for _, f := range res.Figures {
					if f.Name == "server RSS after" {
						n++
					}
				}
				if n != 1 {
					t.Errorf("%d figures \"server RSS after\", want 1", n)
				}
			}
			got, ok := res.Figure(tt.figure)
			if !ok || got <= 0 {
				t.Errorf("figure %q = %v (present %v), want > 0; figures %+v", tt.figure, got, ok, res.Figures)
			}
			if d := cfg.RoundDelay; d > 0 {
				ms, _ := res.Figure("catch-up time")
				rounds, _ := res.Figure("rounds")
				if want := (rounds - 1) * float64(d.Milliseconds()); rounds < 3 || ms < want {
					t.Errorf("catch-up of %v rounds took %v ms, want at least 3 rounds and their delays, %v ms", rounds, ms, want)
				}
			}
			var b strings.Builder
			if err := res.WriteTable(&b); err != nil || !strings.Contains(b.String(), tt.figure) {
				t.Errorf("table lacks %q (err %v):\n%s", tt.figure, err, b.String())
			}
		})
	}
}

// TestFanoutReportsEndedSockets: a socket the server closes during a
// fan-out run misses the later commits, and the run says which socket
// ended and why, besides counting the missed deliveries.
func TestFanoutReportsEndedSockets(t *testing.T) {
	const sockets = 5
	var upgrades, syncs atomic.Int64
	hs, sc, _ := newTestServerWrapped(t, func(srv *syncgo.Server, next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			switch {
			case strings.HasSuffix(r.URL.Path, "/realtime"):
				upgrades.Add(1)
			case strings.HasSuffix(r.URL.Path, "/sync") && upgrades.Load() == sockets:
				// The writer's first round, then its pushes: before the
				// second push, socket 3's connection is closed.
				if syncs.Add(1) == 3 {
					srv.CloseActor("default", "bench-3")
				}
			}
			next.ServeHTTP(w, r)
		})
	})
	res, err := Run(context.Background(), Config{Workload: "fanout", Sockets: sockets, Commits: 4,
		URL: hs.URL, Schema: sc, Timeout: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if n, _ := res.Figure("sockets ended during the run"); n != 1 {
		t.Errorf("sockets ended during the run: %v, want 1", n)
	}
	if missed, _ := res.Figure("deliveries missed"); missed < 1 {
		t.Errorf("deliveries missed: %v, want at least 1", missed)
	}
	short, _ := res.Params["sockets that missed deliveries"].([]string)
	if len(short) != 1 || !strings.HasPrefix(short[0], "socket 3: ") {
		t.Errorf("sockets that missed deliveries: %q, want socket 3 alone", short)
	}
	why, _ := res.Params["sockets ended"].([]string)
	if len(why) != 1 || !strings.HasPrefix(why[0], "socket 3: ") || !strings.Contains(why[0], "1008") {
		t.Errorf("sockets ended: %q, want socket 3 closed with 1008 (policy violation)", why)
	}
}

// TestMissingPID: the memory workload needs the server's pid.
func TestMissingPID(t *testing.T) {
	hs, sc := newTestServer(t)
	_, err := Run(context.Background(), Config{Workload: "memory", Sockets: 1, URL: hs.URL, Schema: sc})
	if err == nil || !strings.Contains(err.Error(), "pid") {
		t.Fatalf("err = %v, want a missing-pid error", err)
	}
}

func TestFormatValue(t *testing.T) {
	tests := []struct {
		in   float64
		want string
	}{
		{0, "0"}, {12345, "12,345"}, {-1234567, "-1,234,567"}, {3.14159, "3.14"}, {0.25, "0.250"}, {12.34, "12.3"}, {1234.5, "1,235"},
	}
	for _, tt := range tests {
		if got := formatValue(tt.in); got != tt.want {
			t.Errorf("formatValue(%v) = %q, want %q", tt.in, got, tt.want)
		}
	}
}

// TestSeededCatchup: a catch-up of data seeded before (by an earlier run,
// against a fresh process) reads the log from its start. The scope holds
// more rows than ten bootstrap rounds carry (4,000 each by default), which
// once left the registration's bootstrap unfinished, so that the catch-up
// resumed the bootstrap and read 0 commits.
func TestSeededCatchup(t *testing.T) {
	hs, sc := newTestServer(t)
	base := Config{URL: hs.URL, Schema: sc, Timeout: 30 * time.Second, Scope: "seeded-" + randomHex(4)}
	seed := base
	seed.Workload, seed.Rows = "bootstrap", 41_000
	if _, err := Run(context.Background(), seed); err != nil {
		t.Fatal(err)
	}
	cu := base
	cu.Workload, cu.Seeded = "catchup", true
	res, err := Run(context.Background(), cu)
	if err != nil {
		t.Fatal(err)
	}
	if got, _ := res.Figure("commits caught up"); got < 41_000/seedBatch || res.Errors != 0 {
		t.Fatalf("seeded catch-up read %v commits with %d errors, want every seeded commit (at least %d)", got, res.Errors, 41_000/seedBatch)
	}
}

// TestCatchUpFollowsReset: with -catchup-rows, commits that update a few
// rows in turn make a scope small beside its log; a server that answers
// such a catch-up with a reset (§8.4) is followed into a fresh bootstrap
// of every row, and one that replays is read to the end.
func TestCatchUpFollowsReset(t *testing.T) {
	for _, after := range []int64{200, -1} {
		t.Run(fmt.Sprint("after ", after), func(t *testing.T) {
			hs, sc := newTestServerWith(t, func(c *syncgo.Config) { c.Limits.CatchUpBootstrapAfter = after })
			res, err := Run(context.Background(), Config{URL: hs.URL, Schema: sc, Timeout: 10 * time.Second,
				Workload: "catchup", Commits: 1500, CatchUpRows: 40})
			if err != nil {
				t.Fatal(err)
			}
			resets, _ := res.Figure("resets (bootstrapped again)")
			rows, _ := res.Figure("rows bootstrapped")
			commits, _ := res.Figure("commits caught up")
			if after > 0 && (resets != 1 || rows != 40 || commits != 0 || res.Errors != 0) {
				t.Fatalf("resets %v, rows %v, commits %v, errors %d; want 1 reset and a bootstrap of the 40 rows", resets, rows, commits, res.Errors)
			}
			if after < 0 && (resets != 0 || commits != 1500 || res.Errors != 0) {
				t.Fatalf("resets %v, commits %v, errors %d; want the 1,500 commits replayed", resets, commits, res.Errors)
			}
		})
	}
}

// TestRowGenValueBytes: -value-bytes pads the generated string values to
// that length, and leaves the key, the scope and the other types alone.
func TestRowGenValueBytes(t *testing.T) {
	sc := demoSchema(t)
	plain, err := newRowGen(sc, "", 0)
	if err != nil {
		t.Fatal(err)
	}
	padded, err := newRowGen(sc, "", 600)
	if err != nil {
		t.Fatal(err)
	}
	a, b := plain.row("w", 7, "scope-1"), padded.row("w", 7, "scope-1")
	pk, scopeCol := padded.table.PrimaryKey(), padded.scopeCol
	padCols := 0
	for i, c := range padded.table.Columns() {
		switch {
		case i == pk || i == scopeCol || c.Type != wire.TypeString || a[i].Null:
			if !reflect.DeepEqual(a[i], b[i]) {
				t.Errorf("column %s: %+v padded to %+v", c.Name, a[i], b[i])
			}
		default:
			padCols++
			if len(b[i].Str) != 600 || !strings.HasPrefix(b[i].Str, a[i].Str) {
				t.Errorf("column %s: %d bytes %q, want 600 starting %q", c.Name, len(b[i].Str), b[i].Str[:min(20, len(b[i].Str))], a[i].Str)
			}
		}
	}
	if padCols == 0 {
		t.Fatalf("table %s has no string column to pad", padded.table.Name())
	}
}

// TestReadRSSParts: the resident memory's parts add up to no more than
// its total, and a Go process has both anonymous and file pages.
func TestReadRSSParts(t *testing.T) {
	m, err := readRSSParts(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	if m.anon <= 0 || m.file <= 0 || m.anon+m.file > m.total {
		t.Fatalf("rss %+v: want anonymous and file parts within the total", m)
	}
	if _, err := readRSSParts(-1); err == nil {
		t.Fatal("no error for a process that does not exist")
	}
}

// TestFanoutDeflate: with WSDeflate the fan-out sockets negotiate
// permessage-deflate, and every delta, sent compressed, is inflated and
// applied by the epoll readers and by the goroutine readers alike.
func TestFanoutDeflate(t *testing.T) {
	for _, goroutines := range []bool{false, true} {
		t.Run(fmt.Sprintf("goroutines=%v", goroutines), func(t *testing.T) {
			hs, sc, srv := newTestServerWrapped(t, nil)
			const sockets, commits = 24, 5
			before := srv.RealtimeStats().Compressed
			res, err := Run(context.Background(), Config{Workload: "fanout", Sockets: sockets, Commits: commits,
				SocketGoroutines: goroutines, WSDeflate: true, URL: hs.URL, Schema: sc, Timeout: 10 * time.Second,
				settle: 10 * time.Millisecond})
			if err != nil {
				t.Fatal(err)
			}
			if res.Errors != 0 {
				t.Errorf("errors = %d, want 0", res.Errors)
			}
			if n, _ := res.Figure("deliveries"); n != sockets*commits {
				t.Errorf("deliveries %v, want %d", n, sockets*commits)
			}
			// Each delta is compressed once for all the sockets.
			if n := srv.RealtimeStats().Compressed - before; n < commits {
				t.Errorf("the server compressed %d messages, want at least the %d deltas", n, commits)
			}
			if goroutines || runtime.GOOS != "linux" {
				return
			}
			if n, _ := res.Figure("compressed messages inflated"); n < sockets*commits {
				t.Errorf("compressed messages inflated %v, want at least %d (every delivery)", n, sockets*commits)
			}
		})
	}
}
