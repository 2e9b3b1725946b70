package faultsuite

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	mrand "math/rand/v2"
	"net/http"
	"net/http/httptest"
	"net/url"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/syncgo/syncgo"
	"github.com/syncgo/syncgo/internal/pgtest"
	"github.com/syncgo/syncgo/internal/sspclient"
	"github.com/syncgo/syncgo/pgstore"
	"github.com/syncgo/syncgo/schema"
	"github.com/syncgo/syncgo/sqlitestore"
	"github.com/syncgo/syncgo/store"
	"github.com/syncgo/syncgo/wire"
)

var (
	flagClients = flag.Int("faults.clients", 20, "clients of the fault suite")
	flagSteps   = flag.Int("faults.steps", 8, "steps per client")
	flagSeed    = flag.Uint64("faults.seed", 0, "seed of the fault suite; 0 picks one (printed on failure)")
	flagLarge   = flag.Bool("faults.large", false, "the large size: 80 clients, 400 steps (overrides -faults.clients and -faults.steps)")
	flagDriver  = flag.String("faults.driver", "both", "sqlite, postgres or both")
	flagPGKill  = flag.Bool("faults.pgkill", true, "terminate the server's Postgres backends now and then")
)

const (
	partition  = "fault"
	projects   = 6
	rowPool    = 80 // row ids are drawn from r0..r79, so writers collide
	pgMaxConns = 8  // the server's Postgres pool
)

// TestFaultSuite runs many clients with seeded random operations, offline
// periods and injected faults against a server over real HTTP, then checks
// that after a final quiet sync without faults every client holds exactly
// the server's rows within its grants, that no client ever held a row
// outside them, and that the log holds every acknowledged commit once.
func TestFaultSuite(t *testing.T) {
	seed := *flagSeed
	if seed == 0 {
		seed = mrand.Uint64()
	}
	clients, steps := *flagClients, *flagSteps
	if *flagLarge {
		clients, steps = 80, 400
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("FAILED with seed %d: go test ./internal/faultsuite -run TestFaultSuite -faults.seed %d -faults.clients %d -faults.steps %d -faults.driver %s",
				seed, seed, clients, steps, *flagDriver)
		}
	})
	for _, d := range []string{"sqlite", "postgres"} {
		if *flagDriver != "both" && *flagDriver != d {
			continue
		}
		t.Run(d, func(t *testing.T) {
			t.Parallel()
			s := newSuite(t, d, seed, clients, steps)
			s.run()
		})
	}
}

func faultSchema(t *testing.T) *schema.Compiled {
	c, err := schema.New(1).
		Table("tasks", "id", schema.String("id"), schema.String("project_id"), schema.String("title"),
			schema.Boolean("done"), schema.Integer("rank").Null()).
		Scope("project:{project_id}").
		Compile()
	if err != nil {
		t.Fatal(err)
	}
	return c
}

type suite struct {
	t      *testing.T
	driver string
	seed   uint64
	steps  int
	schema *schema.Compiled
	store  store.Store
	url    string
	faults atomic.Bool
	// pgKill terminates one (or all) of the server's Postgres backends;
	// nil on SQLite.
	pgKill  func(ctx context.Context, all bool) (int, error)
	clients []*fclient
	grants  map[string][]string // actor → granted projects; read-only after newSuite

	errMu     sync.Mutex
	internals map[string]int // the server's internal errors, by message

	suspectMu sync.Mutex
	suspects  map[string][]string // row id → the clients that held it wrongly
}

// suspect records that a client held a row wrongly, so that the row's
// history is printed when the suite fails.
func (s *suite) suspect(rowID, client string) {
	s.suspectMu.Lock()
	defer s.suspectMu.Unlock()
	s.suspects[rowID] = append(s.suspects[rowID], client)
}

// onError counts the server's internal errors by message.
func (s *suite) onError(err error, route string) {
	s.errMu.Lock()
	defer s.errMu.Unlock()
	msg := route + ": " + err.Error()
	if len(msg) > 200 {
		msg = msg[:200]
	}
	s.internals[msg]++
}

// internalErrors renders the server's internal errors, most frequent first.
func (s *suite) internalErrors() string {
	s.errMu.Lock()
	defer s.errMu.Unlock()
	type kv struct {
		msg string
		n   int
	}
	var all []kv
	for m, n := range s.internals {
		all = append(all, kv{m, n})
	}
	sort.Slice(all, func(i, j int) bool { return all[i].n > all[j].n })
	var b strings.Builder
	for i, e := range all {
		if i == 8 {
			fmt.Fprintf(&b, "\n  … %d more kinds", len(all)-i)
			break
		}
		fmt.Fprintf(&b, "\n  %d× %s", e.n, e.msg)
	}
	return b.String()
}

// fclient is one device: an SSP2 client of one actor, its grants, and
// the random source of its operations.
type fclient struct {
	name   string
	c      *sspclient.Client
	ft     *faultTransport
	grants []string
	rng    *mrand.Rand
	ids    []string // queued commit ids
	fresh  int      // fresh row ids used
	errs   int
	// errKinds counts the failed rounds not made by the transport, by kind.
	errKinds map[string]int
	// realtime: the client keeps a socket open (severed now and then) and
	// applies its deltas.
	realtime bool
	dials    atomic.Int64
	deltas   atomic.Int64
	dropped  atomic.Int64 // deltas not applied (a round in flight, or refused)
	// refused counts the deltas refused because the pulls had not yet
	// reached a dropped delta or the latest cursor at connect
	// (sspclient.ErrCatchingUp): each would have applied over a gap.
	refused atomic.Int64
	// dialBehind counts the connections whose hello said the client was
	// in sync (its client record, written when a pull was served) while
	// the client's cursors were behind it: a pull's response was lost.
	dialBehind atomic.Int64

	vmu sync.Mutex // guards violation (rounds and deltas check it)
	// violation is the first time the client held a row outside its
	// grants, or "".
	violation string
}

func newSuite(t *testing.T, driver string, seed uint64, n, steps int) *suite {
	s := &suite{t: t, driver: driver, seed: seed, steps: steps, schema: faultSchema(t), grants: map[string][]string{},
		internals: map[string]int{}, suspects: map[string][]string{}}
	s.faults.Store(true)
	switch driver {
	case "sqlite":
		st, err := sqlitestore.Open(context.Background(), sqlitestore.Config{Path: filepath.Join(t.TempDir(), "fault.db")})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = st.Close() })
		s.store = st
	case "postgres":
		s.store, s.pgKill = openPostgres(t)
	}
	rng := mrand.New(mrand.NewPCG(seed, 0))
	for i := range n {
		actor := fmt.Sprintf("actor%d", i)
		g := rng.Perm(projects)[:1+rng.IntN(3)]
		slices.Sort(g)
		for _, p := range g {
			s.grants[actor] = append(s.grants[actor], fmt.Sprintf("p%d", p))
		}
	}
	srv, err := syncgo.New(syncgo.Config{Store: s.store, Schema: s.schema, Authenticate: bearerAuth,
		ResolveScopes: s.resolve, RetentionInterval: -1, OnError: s.onError})
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srv.Stop(context.Background()) })
	hs := httptest.NewServer(srv.Handler())
	t.Cleanup(hs.Close)
	s.url = hs.URL
	for i := range n {
		actor := fmt.Sprintf("actor%d", i)
		base := &http.Transport{MaxIdleConnsPerHost: 4}
		t.Cleanup(base.CloseIdleConnections)
		ft := newFaultTransport(base, defaultFaults, &s.faults, seed, uint64(i)+1)
		c, err := sspclient.New(s.url, actor, s.schema, sspclient.Options{
			ClientID:       fmt.Sprintf("device-%d", i),
			AcceptEncoding: []string{"identity", "gzip", "zstd, gzip", "identity"}[i%4],
			HTTPClient:     &http.Client{Transport: ft, Timeout: 30 * time.Second},
			// small pages, so that bootstraps and pulls take several rounds
			LimitCommits: 8, LimitSnapshotRows: 16,
		})
		if err != nil {
			t.Fatal(err)
		}
		fc := &fclient{name: actor, c: c, ft: ft, grants: s.grants[actor], rng: mrand.New(mrand.NewPCG(seed, uint64(i)+1<<32)),
			errKinds: map[string]int{}, realtime: i%3 == 0}
		s.subscribe(fc)
		s.clients = append(s.clients, fc)
	}
	return s
}

// subscribe declares the client's subscriptions, in one of three shapes:
// one per granted project; one asking for every project (the server
// narrows it to the grants); or one per granted project plus one for a
// project it is not granted (revoked).
func (s *suite) subscribe(fc *fclient) {
	must := func(err error) {
		if err != nil {
			s.t.Fatal(err)
		}
	}
	switch fc.rng.IntN(3) {
	case 0, 2:
		for _, p := range fc.grants {
			must(fc.c.Subscribe("sub-"+p, "tasks", map[string][]string{"project_id": {p}}))
		}
		if fc.rng.IntN(2) == 0 {
			for i := range projects {
				p := fmt.Sprintf("p%d", i)
				if !slices.Contains(fc.grants, p) {
					must(fc.c.Subscribe("sub-"+p, "tasks", map[string][]string{"project_id": {p}}))
					break
				}
			}
		}
	case 1:
		all := make([]string, projects)
		for i := range all {
			all[i] = fmt.Sprintf("p%d", i)
		}
		must(fc.c.Subscribe("sub-all", "tasks", map[string][]string{"project_id": all}))
	}
}

func bearerAuth(r *http.Request) (syncgo.Auth, error) {
	tok, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	if !ok || tok == "" {
		return syncgo.Auth{}, errors.New("no bearer token")
	}
	return syncgo.Auth{ActorID: tok, Partition: partition}, nil
}

func (s *suite) resolve(_ context.Context, q syncgo.ScopeRequest) (map[string][]string, error) {
	g, ok := s.grants[q.ActorID]
	if !ok {
		return nil, fmt.Errorf("unknown actor %q", q.ActorID)
	}
	return map[string][]string{"project_id": slices.Clone(g)}, nil
}

// openPostgres opens a pgstore on a fresh schema with its own
// application_name, and returns a function that terminates its backends.
func openPostgres(t *testing.T) (store.Store, func(context.Context, bool) (int, error)) {
	base := pgtest.URL(t)
	var b [6]byte
	_, _ = rand.Read(b[:])
	name := "syncgo_fault_" + hex.EncodeToString(b[:])
	admin := func(sql string, args ...any) (int, error) {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		conn, err := pgx.Connect(ctx, base)
		if err != nil {
			return 0, err
		}
		defer conn.Close(ctx)
		var n int
		if strings.HasPrefix(sql, "SELECT") {
			err = conn.QueryRow(ctx, sql, args...).Scan(&n)
		} else {
			_, err = conn.Exec(ctx, sql, args...)
		}
		return n, err
	}
	if _, err := admin("CREATE SCHEMA " + name); err != nil {
		t.Fatalf("CREATE SCHEMA: %v", err)
	}
	u, err := url.Parse(base)
	if err != nil {
		t.Fatal(err)
	}
	q := u.Query()
	q.Set("search_path", name)
	q.Set("application_name", name)
	u.RawQuery = q.Encode()
	st, err := pgstore.Open(context.Background(), pgstore.Config{URL: u.String(), MaxConns: pgMaxConns})
	if err != nil {
		t.Fatalf("pgstore.Open: %v", err)
	}
	t.Cleanup(func() {
		_ = st.Close()
		if _, err := admin("DROP SCHEMA " + name + " CASCADE"); err != nil {
			t.Errorf("DROP SCHEMA: %v", err)
		}
	})
	kill := func(_ context.Context, all bool) (int, error) {
		limit := 1
		if all {
			limit = 1000
		}
		return admin(`SELECT count(*) FROM (SELECT pg_terminate_backend(pid) FROM (SELECT pid FROM pg_stat_activity
			WHERE application_name = $1 AND pid <> pg_backend_pid() ORDER BY random() LIMIT $2) p) x`, name, limit)
	}
	return st, kill
}

func (s *suite) run() {
	t := s.t
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	start := time.Now()
	var killed atomic.Int64
	killerDone := make(chan struct{})
	killCtx, stopKiller := context.WithCancel(ctx)
	go func() {
		defer close(killerDone)
		if s.pgKill == nil || !*flagPGKill {
			return
		}
		rng := mrand.New(mrand.NewPCG(s.seed, 7))
		for killCtx.Err() == nil {
			quietPeriod(killCtx, time.Duration(200+rng.IntN(800))*time.Millisecond)
			if killCtx.Err() != nil {
				return
			}
			n, err := s.pgKill(killCtx, rng.IntN(3) == 0)
			if err == nil {
				killed.Add(int64(n))
			}
		}
	}()

	rtCtx, stopRealtime := context.WithCancel(ctx)
	var wg, rtWG sync.WaitGroup
	for i, fc := range s.clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s.drive(ctx, fc)
		}()
		if fc.realtime {
			rtWG.Add(1)
			go func() {
				defer rtWG.Done()
				s.socket(rtCtx, fc, uint64(i))
			}()
		}
	}
	wg.Wait()
	stopRealtime()
	rtWG.Wait()
	stopKiller()
	<-killerDone
	faultPhase := time.Since(start)

	// The final quiet sync, without faults: two passes, so that every
	// outbox reaches the server before every client pulls.
	s.faults.Store(false)
	// A pooled Postgres connection that was terminated fails the next
	// request that uses it unless it idled long enough to be pinged first
	// (pgxpool pings connections idle for over a second): wait for that,
	// and tolerate, and report, one failed round per pooled connection.
	if s.pgKill != nil {
		time.Sleep(1500 * time.Millisecond)
	}
	// A client far behind catches up limitCommits (8) commits a round:
	// the large size's log takes more than 500 rounds (§8.4's catch-up by
	// segments is not implemented), and each round that is not quiet
	// brings at least one commit or bootstrap page.
	part, err := s.store.Partition(ctx, partition)
	if err != nil {
		t.Fatalf("Partition: %v", err)
	}
	maxRounds := 500 + int(part.MaxCommitSeq)
	quietRetries := 0
	for pass := range 3 {
		for _, fc := range s.clients {
			for attempt := 0; ; attempt++ {
				rounds, err := fc.c.SyncUntilQuiet(ctx, maxRounds)
				if err == nil {
					break
				}
				if attempt >= pgMaxConns || s.pgKill == nil {
					t.Fatalf("%s: final sync (pass %d) without faults: %v\nits last rounds:%s\nthe server's internal errors:%s",
						fc.name, pass, err, lastRounds(rounds, 3), s.internalErrors())
				}
				quietRetries++
				t.Logf("%s: final sync (pass %d) without faults failed, retrying: %v", fc.name, pass, err)
			}
			s.checkScopes(fc)
		}
	}
	s.verify()
	counts, kinds := map[string]int{}, map[string]int{}
	errs := 0
	for _, fc := range s.clients {
		for k, v := range fc.ft.Counts() {
			counts[k] += v
		}
		for k, v := range fc.errKinds {
			kinds[k] += v
		}
		errs += fc.errs
	}
	var dials, deltas, refused, dialBehind int64
	for _, fc := range s.clients {
		dials += fc.dials.Load()
		deltas += fc.deltas.Load()
		refused += fc.refused.Load()
		dialBehind += fc.dialBehind.Load()
	}
	t.Logf("%s: %d clients × %d steps in %v: faults %v, %d failed rounds (other than injected: %v), %d Postgres backends terminated, %d retried quiet syncs; %d socket connections severed, %d deltas applied, %d refused until the pulls caught up; %d connections told in sync while behind hello's cursor",
		s.driver, len(s.clients), s.steps, faultPhase.Round(time.Millisecond), counts, errs, kinds, killed.Load(), quietRetries, dials, deltas, refused, dialBehind)
	if testing.Verbose() {
		t.Logf("%s: the server's internal errors:%s", s.driver, s.internalErrors())
	}
}

// drive runs one client's steps: random writes, an online round with
// faults, or an offline period, checking its scopes after every round.
func (s *suite) drive(ctx context.Context, fc *fclient) {
	offline := 0
	for step := 0; step < s.steps && ctx.Err() == nil; step++ {
		for range fc.rng.IntN(3) {
			s.mutate(fc)
		}
		if offline > 0 {
			offline--
			continue
		}
		if fc.rng.IntN(12) == 0 {
			offline = 1 + fc.rng.IntN(6)
			continue
		}
		if _, err := fc.c.Round(ctx); err != nil {
			fc.errs++
			if !errors.Is(err, errInjected) {
				fc.errKinds[errKind(err)]++
			}
		}
		s.checkScopes(fc)
		quietPeriod(ctx, time.Duration(fc.rng.IntN(8))*time.Millisecond)
	}
}

// socket keeps a realtime connection of the client open until ctx ends:
// each connection is severed (closed without a close frame) after a random
// time, then dialed again. Deltas are applied as they come and acked;
// after each one the client's scopes are checked.
func (s *suite) socket(ctx context.Context, fc *fclient, stream uint64) {
	rng := mrand.New(mrand.NewPCG(s.seed, stream+1<<40))
	for ctx.Err() == nil {
		rt, err := fc.c.DialRealtime(ctx, nil)
		if err != nil {
			quietPeriod(ctx, 20*time.Millisecond)
			continue
		}
		fc.dials.Add(1)
		if floor, ok := fc.c.AckFloor(); ok {
			if !rt.Hello.RequiresSync && floor < rt.Hello.Cursor {
				fc.dialBehind.Add(1)
			}
			_ = rt.Ack(floor) // the ack point after the last pull (§8.2): deltas start from it
		}
		sever := time.AfterFunc(time.Duration(30+rng.IntN(400))*time.Millisecond, func() { _ = rt.Drop() })
		stop := context.AfterFunc(ctx, func() { _ = rt.Drop() })
		for {
			m, err := rt.Next()
			if err != nil {
				break
			}
			if _, ok := m.Event.(wire.Wake); ok {
				if !s.catchUp(ctx, fc, rt) {
					break
				}
				continue
			}
			if m.Delta == nil {
				continue // a heartbeat or another event
			}
			cursor, err := fc.c.ApplyDelta(m.Delta)
			if errors.Is(err, sspclient.ErrDeltaDropped) {
				// Not applied: a wake-up, and no later delta may apply
				// over the gap before a pull (§8.2).
				fc.dropped.Add(1)
				if errors.Is(err, sspclient.ErrCatchingUp) {
					fc.refused.Add(1)
				}
				if !s.catchUp(ctx, fc, rt) {
					break
				}
				continue
			}
			if err != nil {
				s.t.Errorf("%s: a delta cannot be applied: %v", fc.name, err)
				break
			}
			s.checkScopes(fc)
			if cursor >= 0 {
				fc.deltas.Add(1)
				_ = rt.Ack(cursor)
			}
		}
		sever.Stop()
		stop()
		_ = rt.Drop()
		quietPeriod(ctx, time.Duration(rng.IntN(40))*time.Millisecond)
	}
}

// catchUp answers a wake-up or a delta that was not applied (§8.2, §8.3):
// it pulls, through the faults, until a round succeeds, before the next
// message is read, and then acks the floor, which lets the server resume
// deltas. It reports false when ctx ended first.
func (s *suite) catchUp(ctx context.Context, fc *fclient, rt *sspclient.Realtime) bool {
	for ctx.Err() == nil {
		if _, err := fc.c.Round(ctx); err != nil {
			quietPeriod(ctx, 5*time.Millisecond)
			continue
		}
		s.checkScopes(fc)
		if floor, ok := fc.c.AckFloor(); ok {
			_ = rt.Ack(floor)
		}
		return true
	}
	return false
}

// mutate queues one commit of random operations on rows the client
// knows or on new rows: inserts, sparse updates, versioned updates that
// may conflict, deletes, and now and then a write into a project the
// actor is not granted or an attempt to move a row (both rejected).
func (s *suite) mutate(fc *fclient) {
	rows := fc.c.Rows("tasks")
	held := make([]string, 0, len(rows))
	for id := range rows {
		held = append(held, id)
	}
	sort.Strings(held)
	project := func() string { return fc.grants[fc.rng.IntN(len(fc.grants))] }
	id, err := fc.c.Mutate(func(tx *sspclient.Tx) error {
		for range 1 + fc.rng.IntN(3) {
			var err error
			switch k := fc.rng.IntN(20); {
			case k < 6 || len(held) == 0: // an insert: a fresh row, or one of the pool that others write too
				id := fmt.Sprintf("r%d", fc.rng.IntN(rowPool))
				if fc.rng.IntN(2) == 0 {
					fc.fresh++
					id = fmt.Sprintf("%s-%d", fc.name, fc.fresh)
				}
				err = tx.Upsert("tasks", map[string]any{"id": id,
					"project_id": project(), "title": fc.name + " new", "done": false, "rank": int64(fc.rng.IntN(100))})
			case k < 10: // a sparse update
				err = tx.Upsert("tasks", map[string]any{"id": held[fc.rng.IntN(len(held))], "title": fmt.Sprintf("%s edit %d", fc.name, fc.rng.IntN(1000))})
			case k < 14: // a versioned update: conflicts when another write got there first
				err = tx.Upsert("tasks", map[string]any{"id": held[fc.rng.IntN(len(held))], "done": fc.rng.IntN(2) == 0,
					"rank": int64(fc.rng.IntN(100))}, sspclient.Versioned())
			case k < 16: // a delete, sometimes versioned
				if fc.rng.IntN(2) == 0 {
					err = tx.Delete("tasks", held[fc.rng.IntN(len(held))], sspclient.Versioned())
				} else {
					err = tx.Delete("tasks", held[fc.rng.IntN(len(held))])
				}
			case k < 17: // a move to another project: sync.invalid_request
				err = tx.Upsert("tasks", map[string]any{"id": held[fc.rng.IntN(len(held))],
					"project_id": fmt.Sprintf("p%d", fc.rng.IntN(projects))})
			default: // an insert into a project the actor may not be granted
				err = tx.Upsert("tasks", map[string]any{"id": fmt.Sprintf("r%d", fc.rng.IntN(rowPool)),
					"project_id": fmt.Sprintf("p%d", fc.rng.IntN(projects)), "title": "maybe forbidden", "done": true})
			}
			if err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		s.t.Errorf("%s: mutate: %v", fc.name, err)
		return
	}
	fc.ids = append(fc.ids, id)
}

// checkScopes records the first moment a client holds a row outside its
// grants.
func (s *suite) checkScopes(fc *fclient) {
	fc.vmu.Lock()
	defer fc.vmu.Unlock()
	if fc.violation != "" {
		return
	}
	tbl, _ := s.schema.Table("tasks")
	for id, r := range fc.c.Rows("tasks") {
		p, _ := r.Map(tbl)["project_id"].(string)
		if !slices.Contains(fc.grants, p) {
			fc.violation = fmt.Sprintf("row %s v%d of project %q (grants %v)", id, r.Version, p, fc.grants)
			s.t.Errorf("%s holds %s", fc.name, fc.violation)
			s.suspect(id, fc.name)
			return
		}
	}
}

// verify compares every client with the server and the log with the
// clients' outcomes.
func (s *suite) verify() {
	t := s.t
	ctx := context.Background()
	tbl, _ := s.schema.Table("tasks")
	server := map[string]string{} // rowId → rendering
	serverProject := map[string]string{}
	var after *string
	for {
		rows, err := s.store.ListRows(ctx, partition, "tasks", after, 500)
		if err != nil {
			t.Fatalf("ListRows: %v", err)
		}
		for _, r := range rows {
			vals, err := tbl.RowCodec().DecodeRow(r.Payload)
			if err != nil {
				t.Fatalf("stored row %s: %v", r.RowID, err)
			}
			server[r.RowID] = render(t, tbl, r.ServerVersion, vals)
			serverProject[r.RowID] = sspclient.Row{Values: vals}.Map(tbl)["project_id"].(string)
		}
		if len(rows) < 500 {
			break
		}
		after = &rows[len(rows)-1].RowID
	}
	if len(server) == 0 {
		t.Fatal("the server holds no rows: the suite exercised nothing")
	}
	for _, fc := range s.clients {
		want := map[string]string{}
		for id, r := range server {
			if slices.Contains(fc.grants, serverProject[id]) {
				want[id] = r
			}
		}
		got := map[string]string{}
		for id, r := range fc.c.Rows("tasks") {
			got[id] = render(t, tbl, r.Version, r.Values)
		}
		for id, w := range want {
			if g, ok := got[id]; !ok {
				t.Errorf("%s (grants %v): missing row %s: server %s", fc.name, fc.grants, id, w)
				s.suspect(id, fc.name)
			} else if g != w {
				t.Errorf("%s (grants %v): row %s differs: client %s, server %s", fc.name, fc.grants, id, g, w)
				s.suspect(id, fc.name)
			}
		}
		for id, g := range got {
			if _, ok := want[id]; !ok {
				t.Errorf("%s (grants %v): holds row %s the server has not (in its grants): %s", fc.name, fc.grants, id, g)
				s.suspect(id, fc.name)
			}
		}
		if n := fc.c.Pending(); n != 0 {
			t.Errorf("%s: %d commits still pending after the quiet sync", fc.name, n)
		}
	}
	s.verifyLog(ctx)
	if t.Failed() {
		s.explainSuspects(ctx)
	}
}

// explainSuspects logs, for each row some client held wrongly, every
// change of it in the log (sequence, commit, op, version, scopes) and the
// subscriptions of the clients concerned: what a failure needs to be
// explained.
func (s *suite) explainSuspects(ctx context.Context) {
	t := s.t
	s.suspectMu.Lock()
	suspects := s.suspects
	s.suspectMu.Unlock()
	if len(suspects) == 0 {
		return
	}
	part, err := s.store.Partition(ctx, partition)
	if err != nil {
		t.Logf("explain: %v", err)
		return
	}
	history := map[string][]string{}
	for after := part.HorizonSeq; ; {
		cs, err := s.store.ReadCommits(ctx, partition, after, 1<<62, 1000)
		if err != nil {
			t.Logf("explain: ReadCommits: %v", err)
			return
		}
		if len(cs) == 0 {
			break
		}
		for _, c := range cs {
			for i, ch := range c.Changes {
				if _, ok := suspects[ch.RowID]; ok {
					history[ch.RowID] = append(history[ch.RowID], fmt.Sprintf("seq %d change %d: %s/%s by %s: %v v%d scopes %v",
						c.Seq, i, c.ClientID, c.ClientCommitID, c.ActorID, ch.Op, ch.RowVersion, ch.Scopes))
				}
			}
		}
		after = cs[len(cs)-1].Seq
	}
	byName := map[string]*fclient{}
	for _, fc := range s.clients {
		byName[fc.name] = fc
	}
	n := 0
	for id, clients := range suspects {
		if n++; n > 10 {
			t.Logf("explain: … %d more rows", len(suspects)-10)
			break
		}
		t.Logf("explain: row %s (horizon %d, head %d), held wrongly by %v; its changes:\n  %s", id, part.HorizonSeq, part.MaxCommitSeq,
			clients, strings.Join(history[id], "\n  "))
		seen := map[string]bool{}
		for _, c := range clients {
			if seen[c] {
				continue
			}
			seen[c] = true
			fc := byName[c]
			var subs []string
			for _, p := range []string{"all", "p0", "p1", "p2", "p3", "p4", "p5"} {
				if st, ok := fc.c.Subscription("sub-" + p); ok {
					subs = append(subs, fmt.Sprintf("%s cursor %d status %v effective %v", st.ID, st.Cursor, st.Status, st.Effective))
				}
			}
			t.Logf("explain: %s (grants %v, realtime %v: %d deltas, %d dropped, dialBehind %d): %s", c, fc.grants, fc.realtime,
				fc.deltas.Load(), fc.dropped.Load(), fc.dialBehind.Load(), strings.Join(subs, "; "))
		}
	}
}

// verifyLog checks that every commit acknowledged as applied or cached is
// in the log exactly once at its sequence, that no rejected commit is,
// that sequences are dense, and that no rejection is an internal error.
func (s *suite) verifyLog(ctx context.Context) {
	t := s.t
	part, err := s.store.Partition(ctx, partition)
	if err != nil {
		t.Fatalf("Partition: %v", err)
	}
	type key struct{ client, commit string }
	inLog := map[key][]int64{}
	next := part.HorizonSeq + 1
	for after := part.HorizonSeq; ; {
		cs, err := s.store.ReadCommits(ctx, partition, after, 1<<62, 1000)
		if err != nil {
			t.Fatalf("ReadCommits: %v", err)
		}
		if len(cs) == 0 {
			break
		}
		for _, c := range cs {
			if c.Seq != next {
				t.Fatalf("commit sequences are not dense: %d follows %d", c.Seq, next-1)
			}
			next++
			k := key{c.ClientID, c.ClientCommitID}
			inLog[k] = append(inLog[k], c.Seq)
		}
		after = cs[len(cs)-1].Seq
	}
	codes := map[string]int{}
	for _, fc := range s.clients {
		for _, id := range fc.ids {
			if _, ok := fc.c.Outcome(id); !ok {
				t.Errorf("%s: commit %s has no outcome after the quiet sync", fc.name, id)
			}
		}
		for _, o := range fc.c.Outcomes() {
			seqs := inLog[key{fc.c.ClientID(), o.CommitID}]
			switch {
			case o.Dropped != "":
				codes["dropped "+o.Dropped]++
			case o.Status == wire.PushApplied || o.Status == wire.PushCached:
				codes[o.Status.String()]++
				if len(seqs) == 0 && onlyDeletes(o) && o.CommitSeq <= part.MaxCommitSeq {
					// Deletes of absent rows only: applied as a no-op
					// that appends no commit (issue 15 finding 9).
					codes["no-op"]++
					continue
				}
				if !slices.Equal(seqs, []int64{o.CommitSeq}) {
					t.Errorf("%s: commit %s acknowledged %v at %d, in the log at %v", fc.name, o.CommitID, o.Status, o.CommitSeq, seqs)
				}
			default:
				codes[o.ErrorCode()]++
				if len(seqs) != 0 {
					t.Errorf("%s: commit %s rejected (%s), in the log at %v", fc.name, o.CommitID, o.ErrorCode(), seqs)
				}
				if o.ErrorCode() == "sync.internal_error" {
					t.Errorf("%s: commit %s settled as a rejection with sync.internal_error: %+v", fc.name, o.CommitID, o.Results)
				}
			}
		}
	}
	if testing.Verbose() {
		b, _ := json.Marshal(codes)
		t.Logf("%s: outcomes %s; log 1..%d", s.driver, b, part.MaxCommitSeq)
	}
}

// onlyDeletes reports whether every operation of an applied commit is a
// delete: such a commit may have been a no-op (§6.2, deletes of absent
// rows), which appends nothing to the log.
func onlyDeletes(o sspclient.Outcome) bool {
	if o.Commit == nil {
		return false
	}
	for _, op := range o.Commit.Operations {
		if op.Op != wire.OpDelete {
			return false
		}
	}
	return true
}

// errKind names an error by its protocol code or its first words.
func errKind(err error) string {
	var he *sspclient.HTTPError
	if errors.As(err, &he) {
		return fmt.Sprintf("HTTP %d %s", he.StatusCode, he.Code())
	}
	msg := err.Error()
	if i := strings.Index(msg, "sync."); i >= 0 {
		msg = msg[i:]
	}
	if len(msg) > 60 {
		msg = msg[:60]
	}
	return msg
}

func render(t *testing.T, tbl *schema.CompiledTable, version int64, vals []wire.Value) string {
	b, err := json.Marshal(wire.RenderRowValues(tbl.WireColumns(), vals))
	if err != nil {
		t.Fatal(err)
	}
	return fmt.Sprintf("v%d %s", version, b)
}

// lastRounds renders the sections of the last n rounds: what kept a
// client from being quiet.
func lastRounds(rounds []*sspclient.RoundResult, n int) string {
	var b strings.Builder
	for _, r := range rounds[max(0, len(rounds)-n):] {
		fmt.Fprintf(&b, "\n  round: reset %v, %d pushed", r.ResetRequired, len(r.Pushed))
		for _, sec := range r.Sections {
			st := "none"
			if sec.BootstrapState != nil {
				st = "set"
			}
			fmt.Fprintf(&b, "\n    %s status %v reason %q bootstrap %v: %d commits, %d segments, %d rows, next %d, state %s, complete %v",
				sec.ID, sec.Status, sec.Reason, sec.Bootstrap, sec.Commits, sec.Segments, sec.Rows, sec.NextCursor, st, sec.Complete)
		}
	}
	return b.String()
}
