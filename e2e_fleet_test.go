package syncgo_test

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/syncgo/syncgo"
	"github.com/syncgo/syncgo/internal/pgtest"
	"github.com/syncgo/syncgo/internal/sspclient"
	"github.com/syncgo/syncgo/pgstore"
	"github.com/syncgo/syncgo/sqlitestore"
	"github.com/syncgo/syncgo/store"
	"github.com/syncgo/syncgo/wire"
)

// A fleet is several server processes on one database: each test process
// here is a syncgo.Server with a store of its own (its own connection pool
// or file handles) on the same Postgres schema or SQLite file, as two
// `syncgo serve` processes behind a load balancer would be.

// fleetDB opens stores on one shared database.
type fleetDB struct {
	name string
	// open returns a function that opens another store on a fresh
	// database each call returns.
	open func(t *testing.T) func(t *testing.T) store.Store
}

var fleetDBs = []fleetDB{
	{name: "sqlite", open: func(t *testing.T) func(t *testing.T) store.Store {
		path := filepath.Join(t.TempDir(), "sync.db")
		return func(t *testing.T) store.Store {
			s, err := sqlitestore.Open(context.Background(), sqlitestore.Config{Path: path})
			if err != nil {
				t.Fatalf("sqlitestore.Open: %v", err)
			}
			t.Cleanup(func() { _ = s.Close() })
			return s
		}
	}},
	{name: "postgres", open: func(t *testing.T) func(t *testing.T) store.Store {
		u := pgtest.Schema(t, "syncgo_fleet", false)
		return func(t *testing.T) store.Store {
			s, err := pgstore.Open(context.Background(), pgstore.Config{URL: u, MaxConns: 8})
			if err != nil {
				t.Fatalf("pgstore.Open: %v", err)
			}
			t.Cleanup(func() { _ = s.Close() })
			return s
		}
	}},
}

func forEachFleetDB(t *testing.T, fn func(t *testing.T, open func(t *testing.T) store.Store)) {
	t.Helper()
	for _, db := range fleetDBs {
		t.Run(db.name, func(t *testing.T) {
			t.Parallel()
			fn(t, db.open(t))
		})
	}
}

// fleetNode is one server process of a fleet.
type fleetNode struct {
	store store.Store
	srv   *syncgo.Server
	http  *httptest.Server
}

// startNode starts a server on st with the e2e schema and resolver.
func startNode(t *testing.T, e *e2eEnv, st store.Store, tweak ...func(*syncgo.Config)) *fleetNode {
	t.Helper()
	cfg := syncgo.Config{Store: st, Schema: e.schema, Authenticate: bearerAuth, ResolveScopes: e.resolve,
		RetentionInterval: -1, SegmentSweepInterval: -1}
	for _, f := range tweak {
		f(&cfg)
	}
	// Listen first: a server with signed URLs mints them under its own
	// address (SignedURLs.BaseURL left empty here means that address).
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	if cfg.SignedURLs != nil && cfg.SignedURLs.BaseURL == "" {
		su := *cfg.SignedURLs
		su.BaseURL = "http://" + ln.Addr().String()
		cfg.SignedURLs = &su
	}
	srv, err := syncgo.New(cfg)
	if err != nil {
		ln.Close()
		t.Fatal(err)
	}
	if err := srv.Start(context.Background()); err != nil {
		ln.Close()
		t.Fatal(err)
	}
	hs := httptest.NewUnstartedServer(srv.Handler())
	hs.Listener.Close()
	hs.Listener = ln
	hs.Start()
	n := &fleetNode{store: st, srv: srv, http: hs}
	t.Cleanup(func() { n.stop() })
	return n
}

func (n *fleetNode) stop() {
	n.http.Close()
	_ = n.srv.Stop(context.Background())
}

// roundRobin is a load balancer without affinity: each request goes to the
// next node in turn. It records which node served each segment download.
type roundRobin struct {
	mu    sync.Mutex
	nodes []*url.URL
	next  int
	// syncs and downloads map request kinds to the nodes that served them.
	syncs, downloads []int
}

func newRoundRobin(t *testing.T, nodes ...*fleetNode) *roundRobin {
	rr := &roundRobin{}
	for _, n := range nodes {
		u, err := url.Parse(n.http.URL)
		if err != nil {
			t.Fatal(err)
		}
		rr.nodes = append(rr.nodes, u)
	}
	return rr
}

func (rr *roundRobin) RoundTrip(r *http.Request) (*http.Response, error) {
	rr.mu.Lock()
	i := rr.next
	rr.next = (rr.next + 1) % len(rr.nodes)
	if r.Method == http.MethodPost {
		rr.syncs = append(rr.syncs, i)
	} else {
		rr.downloads = append(rr.downloads, i)
	}
	rr.mu.Unlock()
	out := r.Clone(r.Context())
	out.URL.Scheme, out.URL.Host = rr.nodes[i].Scheme, rr.nodes[i].Host
	out.Host = ""
	return http.DefaultTransport.RoundTrip(out)
}

// fleetSegmentRefs starts two processes A and B on one database, with
// segments never inline, writes rows a00, a01, … of project p1 (title
// title) through A, and bootstraps alice from A in pages of 10 rows: the
// SEGMENT_REFs she got, one per page.
func fleetSegmentRefs(t *testing.T, open func(t *testing.T) store.Store, rows int, title string) (e *e2eEnv, a, b *fleetNode, refs []wire.SegmentRef) {
	t.Helper()
	e = &e2eEnv{t: t, schema: e2eSchema(t, 1), allowed: map[string]map[string][]string{}}
	never := func(c *syncgo.Config) { c.Limits.InlineSegmentMaxBytes = syncgo.NeverInline }
	a = startNode(t, e, open(t), never)
	b = startNode(t, e, open(t), never)
	e.store, e.url = a.store, a.http.URL

	w := e.client("writer", sspclient.Options{})
	for i := range rows {
		mustUpsert(t, w, taskRow(fmt.Sprintf("a%02d", i), "p1", title))
	}
	syncQuiet(t, w)
	ca := e.client("alice", sspclient.Options{Accept: wire.AcceptExternalRows, LimitSnapshotRows: 10})
	mustSubscribe(t, ca, "tasks-p1", "p1")
	for _, res := range syncQuiet(t, ca) {
		for _, s := range res.Sections {
			refs = append(refs, s.Refs...)
		}
	}
	if want := (rows + 9) / 10; len(refs) != want {
		t.Fatalf("bootstrap of %d rows in pages of 10 used %d SEGMENT_REFs, want %d", rows, len(refs), want)
	}
	return e, a, b, refs
}

// A bootstrap whose SEGMENT_REFs one process minted downloads from
// another; behind a load balancer that alternates every request, a client
// bootstraps and writes through both; a process started after another
// stopped serves the segments that one published (they live in the
// database); and a sqlite image one process built is reused by the other
// instead of rebuilt (§5.3).
func TestE2EFleetSegments(t *testing.T) {
	forEachFleetDB(t, func(t *testing.T, open func(t *testing.T) store.Store) {
		// Minted by A, downloaded from B.
		e, a, b, refs := fleetSegmentRefs(t, open, 45, "in p1")
		cb, err := sspclient.New(b.http.URL, "alice", e.schema, sspclient.Options{})
		if err != nil {
			t.Fatal(err)
		}
		p1 := map[string][]string{"project_id": {"p1"}}
		for _, ref := range refs {
			body, err := cb.DownloadSegment(context.Background(), ref.SegmentID, p1)
			if err != nil {
				t.Fatalf("segment minted by A, downloaded from B: %v", err)
			}
			if int64(len(body)) != ref.ByteLength {
				t.Fatalf("B served %d bytes of %s, descriptor says %d", len(body), ref.SegmentID, ref.ByteLength)
			}
		}
		// B re-authorizes: other scopes are refused there too.
		wantHTTPError(t, "other scopes on B", http.StatusForbidden, "sync.forbidden",
			dl(cb, refs[0].SegmentID, map[string][]string{"project_id": {"p2"}}))

		// Every request alternates between the nodes.
		rr := newRoundRobin(t, a, b)
		hc := &http.Client{Transport: rr}
		mixed, err := sspclient.New(a.http.URL, "bob", e.schema, sspclient.Options{HTTPClient: hc,
			Accept: wire.AcceptExternalRows, LimitSnapshotRows: 10})
		if err != nil {
			t.Fatal(err)
		}
		mustSubscribe(t, mixed, "tasks-p1", "p1")
		mustUpsert(t, mixed, taskRow("m01", "p1", "through the balancer"))
		syncQuiet(t, mixed)
		rr.mu.Lock()
		if len(rr.downloads) < 5 || len(rr.syncs) < 1 {
			t.Fatalf("the balanced client made %d syncs and %d downloads", len(rr.syncs), len(rr.downloads))
		}
		rr.mu.Unlock()
		sameRows(t, "balanced client vs server", clientRows(t, mixed, "tasks"), e.serverRows("tasks"))

		// A stops; a process started afterwards serves what A published.
		a.stop()
		c := startNode(t, e, open(t))
		cc, err := sspclient.New(c.http.URL, "alice", e.schema, sspclient.Options{})
		if err != nil {
			t.Fatal(err)
		}
		for _, ref := range refs {
			if _, err := cc.DownloadSegment(context.Background(), ref.SegmentID, p1); err != nil {
				t.Fatalf("segment minted before a restart: %v", err)
			}
		}
	})
}

// A sqlite image built by one process is served by another from the
// database (§5.3: no rebuild while an unexpired one exists for the key).
func TestE2EFleetImageReuse(t *testing.T) {
	forEachFleetDB(t, func(t *testing.T, open func(t *testing.T) store.Store) {
		a := newImgEnvOn(t, open(t))
		b := newImgEnvOn(t, open(t))
		a.seedTasks("p1", 0, 30, 2)
		sa := a.pull("alice", "client-a", imgAcceptAll, 10, imgSub("s1", "tasks", -1, nil, "p1"))["s1"]
		ra := imgImageOf(t, sa)
		sb := b.pull("bob", "client-b", imgAcceptAll, 10, imgSub("s1", "tasks", -1, nil, "p1"))["s1"]
		rb := imgImageOf(t, sb)
		if ra.SegmentID != rb.SegmentID {
			t.Fatalf("B served image %s; A built %s: B rebuilt it", rb.SegmentID, ra.SegmentID)
		}
		if a.builds() != 1 || b.builds() != 0 {
			t.Fatalf("builds: A %d, B %d; want 1 and 0", a.builds(), b.builds())
		}
		d := b.download("bob", ra.SegmentID, map[string][]string{"project_id": {"p1"}})
		if d.status != http.StatusOK || imgSegmentID(d.body) != ra.SegmentID {
			t.Fatalf("B's download of A's image: HTTP %d, %d bytes", d.status, len(d.body))
		}
	})
}

// Segment storage is bounded: with a steady stream of new segments (each
// pull a new scope, so new content), a store swept periodically holds at
// most what was published within SegmentTTL + SegmentForgetAfter of the
// clock, and a sweep at the end of the stream empties it.
func TestE2ESegmentStorageBounded(t *testing.T) {
	forEachDriver(t, func(t *testing.T, d e2eDriver) {
		var now sync.Mutex
		clock := int64(1_700_000_000_000)
		nowMs := func() int64 { now.Lock(); defer now.Unlock(); return clock }
		advance := func(ms int64) { now.Lock(); clock += ms; now.Unlock() }
		e := newE2EEnv(t, d, func(c *syncgo.Config) {
			c.Now = nowMs
			c.SegmentSweepInterval = -1
			c.Limits.InlineSegmentMaxBytes = syncgo.NeverInline
			c.Limits.SegmentTTL = time.Hour
			c.Limits.SegmentForgetAfter = 30 * time.Minute
		})
		segs, ok := e.store.(store.SegmentStorer)
		if !ok {
			t.Fatal("the driver keeps no segments")
		}
		w := e.client("writer", sspclient.Options{})
		const projects = 40
		for p := range projects {
			for i := range 3 {
				mustUpsert(t, w, taskRow(fmt.Sprintf("p%02d-%d", p, i), fmt.Sprintf("p%02d", p), "row"))
			}
		}
		syncQuiet(t, w)
		ctx := context.Background()
		var peak store.SegmentStats
		// One new segment every 10 minutes of the clock, a sweep every
		// 10 minutes: at most (60 + 30) / 10 + 1 publications alive.
		for p := range projects {
			c := e.client(fmt.Sprintf("reader-%d", p), sspclient.Options{Accept: wire.AcceptExternalRows})
			mustSubscribe(t, c, "s", fmt.Sprintf("p%02d", p))
			syncQuiet(t, c)
			advance(10 * 60 * 1000)
			if _, err := e.srv.SweepSegments(ctx); err != nil {
				t.Fatal(err)
			}
			st, err := segs.SegmentStore().SegmentStats(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if st.Segments > peak.Segments {
				peak = st
			}
		}
		if peak.Segments > 10 || peak.Segments < 8 {
			t.Fatalf("peak of %d stored segments (%d bytes) for one new segment per 10 min, TTL 1 h, forgotten 30 min after; want 8..10",
				peak.Segments, peak.Bytes)
		}
		advance(2 * 60 * 60 * 1000)
		sw, err := e.srv.SweepSegments(ctx)
		if err != nil {
			t.Fatal(err)
		}
		st, err := segs.SegmentStore().SegmentStats(ctx)
		if err != nil || st != (store.SegmentStats{}) {
			t.Fatalf("after the stream and a sweep: %+v, %v; want an empty store", st, err)
		}
		t.Logf("%s: %d segments published, peak %d segments / %d bytes held, the last sweep deleted %d",
			d.name, projects, peak.Segments, peak.Bytes, sw.Segments)
	})
}

// fullSegments is a segment store whose storage is full.
type fullSegments struct{ store.SegmentStore }

func (fullSegments) PublishSegment(context.Context, string, []byte, store.SegmentPublication) error {
	return fmt.Errorf("%w: segment store (simulated)", store.ErrStorageFull)
}

// A segment is a cache entry: with the segment store full, a client that
// accepts inline segments is served its pages inline; one that accepts
// only references gets the retryable storage error.
func TestE2ESegmentStoreFull(t *testing.T) {
	forEachDriver(t, func(t *testing.T, d e2eDriver) {
		e := newE2EEnv(t, d, func(c *syncgo.Config) {
			c.Limits.InlineSegmentMaxBytes = syncgo.NeverInline
			c.Segments = fullSegments{c.Store.(store.SegmentStorer).SegmentStore()}
		})
		w := e.client("writer", sspclient.Options{})
		for i := range 12 {
			mustUpsert(t, w, taskRow(fmt.Sprintf("t%02d", i), "p1", "row"))
		}
		syncQuiet(t, w)
		c := e.client("alice", sspclient.Options{LimitSnapshotRows: 5})
		mustSubscribe(t, c, "s", "p1")
		for _, res := range syncQuiet(t, c) {
			for _, s := range res.Sections {
				if len(s.Refs) != 0 {
					t.Fatalf("%d SEGMENT_REFs from a full segment store", len(s.Refs))
				}
			}
		}
		sameRows(t, "inline fallback", clientRows(t, c, "tasks"), e.serverRows("tasks"))
		x := e.client("bob", sspclient.Options{Accept: wire.AcceptExternalRows, LimitSnapshotRows: 5})
		mustSubscribe(t, x, "s", "p1")
		if _, err := x.Sync(context.Background()); err == nil {
			t.Fatal("a references-only bootstrap succeeded with the segment store full")
		}
	})
}

// hostRewrite sends a client's HTTP requests to another server of the
// fleet; its socket, dialed by the client itself, stays on its base URL.
type hostRewrite struct{ host string }

func (h hostRewrite) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.URL.Host, r.Host = h.host, h.host
	return http.DefaultTransport.RoundTrip(r)
}

// TestE2EFleetAckAfterSubscriptionOverHTTP is
// TestE2EAckAfterSubscriptionOverHTTP across two processes: the socket on
// A, the pull that adds a subscription on B. A's ack is not persisted
// over the list B stored, and a reconnect is told to pull.
func TestE2EFleetAckAfterSubscriptionOverHTTP(t *testing.T) {
	forEachFleetDB(t, func(t *testing.T, open func(t *testing.T) store.Store) {
		e := &e2eEnv{t: t, schema: e2eSchema(t, 1), allowed: map[string]map[string][]string{}}
		a, b := startNode(t, e, open(t)), startNode(t, e, open(t))
		e.store, e.url = a.store, a.http.URL
		bURL, err := url.Parse(b.http.URL)
		if err != nil {
			t.Fatal(err)
		}
		reader := e.client("reader", sspclient.Options{HTTPClient: &http.Client{Transport: hostRewrite{bURL.Host}}})
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		rt := ackNotOverAddedSubscription(ctx, t, e, reader, e.client("writer", sspclient.Options{}))
		_ = rt.Close()
	})
}
