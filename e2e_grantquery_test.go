package syncgo_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/syncgo/syncgo"
	"github.com/syncgo/syncgo/internal/pgtest"
	"github.com/syncgo/syncgo/pgstore"
	"github.com/syncgo/syncgo/schema"
	"github.com/syncgo/syncgo/store"
	"github.com/syncgo/syncgo/wire"
)

// Grant queries (Config.GrantQueries): an actor's projects come from the
// members table that an admin writes through ordinary pushes. Over real
// HTTP and WebSocket, on both drivers.

// grantQuerySchema is rtSchema's tasks and a members table scoped by
// user.
func grantQuerySchema(t testing.TB) *schema.Compiled {
	t.Helper()
	c, err := schema.New(1).
		Table("tasks", "id", schema.String("id"), schema.String("project_id"), schema.String("title"),
			schema.Boolean("done"), schema.Integer("rank").Null(), schema.String("notes").Null()).
		Scope("project:{project_id}").
		Table("members", "id", schema.String("id"), schema.String("project_id"), schema.String("user_id")).
		Scope("user:{user_id}").Index("members_user", "user_id").
		Compile()
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// memberResolve is the host's resolver: admin may write everything, any
// other actor only its own members rows (the grant query adds projects).
func memberResolve(_ context.Context, req syncgo.ScopeRequest) (map[string][]string, error) {
	if req.ActorID == "admin" {
		return map[string][]string{"project_id": {"*"}, "user_id": {"*"}}, nil
	}
	return map[string][]string{"user_id": {req.ActorID}}, nil
}

var memberGrant = syncgo.GrantQuery{Variable: "project_id",
	SQL: "SELECT project_id FROM members WHERE user_id = :actor ORDER BY project_id"}

// newGrantQueryEnv starts a server with the members grant query on st.
func newGrantQueryEnv(t testing.TB, st store.Store, tweak ...func(*syncgo.Config)) *rtEnv {
	t.Helper()
	e := &rtEnv{t: t, store: st, schema: grantQuerySchema(t), gates: map[string]chan struct{}{}}
	cfg := syncgo.Config{Store: st, Schema: e.schema, Authenticate: rtAuth, ResolveScopes: memberResolve,
		GrantQueries: []syncgo.GrantQuery{memberGrant}, RetentionInterval: -1}
	return e.start(cfg, tweak...)
}

// memberOp upserts (or, with del, deletes) the members row user:project.
func memberOp(t testing.TB, e *rtEnv, user, project string, del bool) wire.Operation {
	t.Helper()
	id := user + ":" + project
	if del {
		return wire.Operation{Table: "members", RowID: id, Op: wire.OpDelete}
	}
	tbl, _ := e.schema.Table("members")
	payload, err := tbl.RowCodec().AppendSparse(nil, wire.SparseRow{Present: []bool{true, true, true},
		Values: []wire.Value{{Str: id}, {Str: project}, {Str: user}}})
	if err != nil {
		t.Fatal(err)
	}
	return wire.Operation{Table: "members", RowID: id, Op: wire.OpUpsert, Payload: payload}
}

// pushOps pushes one commit of ops as the peer and returns its commitSeq.
func pushOps(p *rtPeer, commitID string, ops ...wire.Operation) int64 {
	p.env.t.Helper()
	if p.epoch == nil {
		p.acquireEpoch()
	}
	return rtPushed(p.env.t, p.post(&wire.Request{Commits: []*wire.PushCommit{{ClientCommitID: commitID, Operations: ops}}}))
}

// subStatuses pulls subscriptions over HTTP and returns their statuses
// and the rows each delivered.
func subStatuses(p *rtPeer, subs ...*wire.Subscription) (map[string]wire.SubStatus, map[string][]string) {
	p.env.t.Helper()
	if p.epoch == nil {
		p.acquireEpoch()
	}
	m := p.post(&wire.Request{Pull: &wire.PullHeader{Accept: wire.AcceptInlineRows}, Subscriptions: subs})
	status, rows := map[string]wire.SubStatus{}, map[string][]string{}
	cur := ""
	for _, f := range m.Frames {
		switch f := f.(type) {
		case *wire.SubStart:
			cur = f.ID
			status[f.ID] = f.Status
		case *wire.Commit:
			for _, ch := range f.Changes {
				rows[cur] = append(rows[cur], ch.RowID)
			}
		case *wire.SegmentInline:
			seg, err := wire.DecodeSegment(f.Payload)
			if err != nil {
				p.env.t.Fatal(err)
			}
			tbl, _ := p.env.schema.Table(seg.Header.Table)
			for _, block := range seg.Blocks {
				for _, r := range block {
					vals, err := tbl.RowCodec().DecodeRow(r.Row)
					if err != nil {
						p.env.t.Fatal(err)
					}
					rows[cur] = append(rows[cur], vals[0].Str)
				}
			}
		}
	}
	return status, rows
}

// A pull sees exactly the projects the members table grants, as it
// changes: before the membership, with it, after it is deleted.
func TestGrantQueryPull(t *testing.T) {
	forEachDriver(t, func(t *testing.T, d e2eDriver) {
		e := newGrantQueryEnv(t, d.open(t))
		admin := e.peer("admin", "adm")
		pushOps(admin, "t1", e.pushCommit("x", rtTask{id: "x1", project: "p1"}).Operations...)
		alice := e.peer("alice", "a1")
		if st, _ := subStatuses(alice, rtSub("s1", -1, "p1")); st["s1"] != wire.SubRevoked {
			t.Fatalf("before any membership: s1 %v; want revoked", st["s1"])
		}

		pushOps(admin, "m1", memberOp(t, e, "alice", "p1", false), memberOp(t, e, "bob", "p2", false))
		st, rows := subStatuses(alice, rtSub("s1", -1, "p1"), rtSub("s2", -1, "p2"))
		if st["s1"] != wire.SubActive || !slices.Equal(rows["s1"], []string{"x1"}) {
			t.Fatalf("member of p1: s1 %v with rows %v; want active with [x1]", st["s1"], rows["s1"])
		}
		if st["s2"] != wire.SubRevoked {
			t.Fatalf("bob's membership of p2 granted alice s2 (%v)", st["s2"])
		}
		// Her write to p1 is authorized by the same grant.
		pushOps(alice, "a-x2", e.pushCommit("x", rtTask{id: "x2", project: "p1"}).Operations...)

		pushOps(admin, "m2", memberOp(t, e, "alice", "p1", true))
		if st, _ := subStatuses(alice, rtSub("s1", -1, "p1")); st["s1"] != wire.SubRevoked {
			t.Fatalf("after the membership was deleted: s1 %v; want revoked", st["s1"])
		}
		m, err := alice.tryPost(&wire.Request{Commits: []*wire.PushCommit{e.pushCommit("a-x3", rtTask{id: "x3", project: "p1"})}})
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range m.Frames {
			if r, ok := f.(*wire.PushResult); ok && r.Status == wire.PushApplied {
				t.Fatal("a write to p1 was applied after the membership was deleted")
			}
		}
	})
}

// The commit that deletes a membership narrows the socket before it is
// fanned out (grantQuerySocketFlow).
func TestGrantQuerySocketNarrowedByCommit(t *testing.T) {
	forEachDriver(t, func(t *testing.T, d e2eDriver) {
		e := newGrantQueryEnv(t, d.open(t), func(c *syncgo.Config) { c.Realtime.ReresolveInterval = -1 })
		grantQuerySocketFlow(t, e, e)
		// On Postgres the socket's resolutions came from the pass's
		// batched read; SQLite reads nothing ahead.
		if hits := e.srv.GrantPassHitsForTest(); (hits > 0) != (d.name == "postgres") {
			t.Fatalf("%d resolutions served from a pass on %s", hits, d.name)
		}
	})
}

// The same across two server instances on one Postgres database: the
// socket is on the second, every commit is pushed to the first, and the
// second narrows the socket when the membership commit reaches it.
func TestGrantQuerySocketAcrossInstances(t *testing.T) {
	first, second := twoPostgresStores(t)
	noInterval := func(c *syncgo.Config) { c.Realtime.ReresolveInterval = -1 }
	grantQuerySocketFlow(t, newGrantQueryEnv(t, second, noInterval), newGrantQueryEnv(t, first, noInterval))
}

// grantQuerySocketFlow opens alice's socket on e (members of p1 and p2)
// and pushes through pusher: the commit deleting her p2 membership
// narrows the socket before it is fanned out, so a p2 commit pushed right
// behind it is never delivered; the socket gets a catch-up wake, and p1
// goes on delivering.
func grantQuerySocketFlow(t *testing.T, e, pusher *rtEnv) {
	t.Helper()
	admin := pusher.peer("admin", "adm")
	pushOps(admin, "m1", memberOp(t, e, "alice", "p1", false), memberOp(t, e, "alice", "p2", false))
	alice := e.peer("alice", "a1")
	alice.pull(rtSub("s1", -1, "p1"), rtSub("s2", -1, "p2"))
	s := e.dial("alice", "a1")
	if h := s.hello(); h.RequiresSync {
		t.Fatalf("hello %+v: the registrations did not load", h)
	}
	pushOps(admin, "c0", pusher.pushCommit("x", rtTask{id: "x0", project: "p2"}).Operations...)
	if rows, _ := rtDeltaRows(s.delta()); !slices.Equal(rows, []string{"x0"}) {
		t.Fatalf("delta rows %v while p2 is granted; want [x0]", rows)
	}

	pushOps(admin, "m2", memberOp(t, e, "alice", "p2", true))
	behind := pushOps(admin, "c-p2", e.pushCommit("x", rtTask{id: "x-p2", project: "p2"}).Operations...)
	w := s.wake()
	if w.Reason != wire.WakeCatchupRequired {
		t.Fatalf("wake %+v; want catchup-required", w)
	}
	s.ack(behind)
	s.barrier()
	p1 := pushOps(admin, "c-p1", e.pushCommit("x", rtTask{id: "x-p1", project: "p1"}).Operations...)
	m := s.delta()
	rows, next := rtDeltaRows(m)
	if !slices.Equal(rows, []string{"x-p1"}) || next["s1"] != p1 {
		t.Fatalf("delta rows %v, cursors %v; want only x-p1 on s1 at %d", rows, next, p1)
	}
	if st, _ := subStatuses(alice, rtSub("s2", -1, "p2")); st["s2"] != wire.SubRevoked {
		t.Fatalf("s2 %v after the membership was deleted; want revoked", st["s2"])
	}
}

// New refuses grant queries that cannot run: an undeclared variable, a
// table the schema does not have, a parameter other than :actor, a
// storage table; CheckGrantQueries refuses the same for both dialects.
func TestGrantQueryRefused(t *testing.T) {
	sc := grantQuerySchema(t)
	for _, tc := range []struct {
		q    syncgo.GrantQuery
		want string
	}{
		{syncgo.GrantQuery{Variable: "team_id", SQL: "SELECT 1"}, "no scope variable"},
		{syncgo.GrantQuery{Variable: "project_id", SQL: "SELECT project_id FROM teams"}, "no table"},
		{syncgo.GrantQuery{Variable: "project_id", SQL: "SELECT project_id FROM members WHERE user_id = :who"}, ":who"},
		{syncgo.GrantQuery{Variable: "project_id", SQL: "SELECT value FROM sync_row_scopes"}, "sync_row_scopes"},
		{syncgo.GrantQuery{Variable: "project_id", SQL: ""}, "empty"},
		{syncgo.GrantQuery{Variable: "project_id", SQL: memberGrant.SQL, MaxValues: 100001}, "MaxValues"},
		{syncgo.GrantQuery{Variable: "project_id", SQL: memberGrant.SQL, PostgresSQL: "SELECT project_id FROM members WHERE user_id = :user"}, ":user"},
	} {
		err := syncgo.CheckGrantQueries([]syncgo.GrantQuery{tc.q}, sc)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("CheckGrantQueries(%+v) = %v; want an error naming %q", tc.q, err, tc.want)
		}
	}
	if err := syncgo.CheckGrantQueries([]syncgo.GrantQuery{memberGrant}, sc); err != nil {
		t.Fatal(err)
	}
	_, err := syncgo.New(syncgo.Config{Store: rtOpenSQLite(t), Schema: sc, Authenticate: rtAuth, ResolveScopes: memberResolve,
		GrantQueries: []syncgo.GrantQuery{{Variable: "project_id", SQL: "SELECT project_id FROM teams"}}})
	if err == nil {
		t.Fatal("New accepted a grant query over an unknown table")
	}
}

// A grant query over values that are not plain strings: numbers and
// booleans grant their text; NULL, "*" and empty strings grant nothing;
// no other value is granted.
func TestGrantQueryValues(t *testing.T) {
	e := newGrantQueryEnv(t, rtOpenSQLite(t), func(c *syncgo.Config) {
		c.GrantQueries = append(c.GrantQueries, syncgo.GrantQuery{Variable: "project_id",
			SQL: "SELECT v FROM (SELECT 7 AS v UNION ALL SELECT 2.5 UNION ALL SELECT NULL UNION ALL SELECT '*' UNION ALL SELECT '' UNION ALL SELECT 'q' || :actor) AS t" +
				" WHERE EXISTS (SELECT 1 FROM members WHERE user_id = :actor)"})
	})
	admin := e.peer("admin", "adm")
	pushOps(admin, "m", memberOp(t, e, "alice", "p1", false))
	pushOps(admin, "t", e.pushCommit("x", rtTask{id: "n7", project: "7"}, rtTask{id: "n25", project: "2.5"},
		rtTask{id: "star", project: "*"}, rtTask{id: "qa", project: "qalice"}).Operations...)
	alice := e.peer("alice", "a1")
	st, rows := subStatuses(alice, rtSub("s7", -1, "7"), rtSub("s25", -1, "2.5"), rtSub("sq", -1, "qalice"),
		rtSub("sx", -1, "x"))
	for _, id := range []string{"s7", "s25", "sq"} {
		if st[id] != wire.SubActive || len(rows[id]) != 1 {
			t.Errorf("%s: %v with rows %v; want active with one row", id, st[id], rows[id])
		}
	}
	if st["sx"] == wire.SubActive {
		t.Error("sx is active: the data's \"*\" granted every project")
	}
}

// A grant query that fails (here: more rows than its MaxValues) fails the
// resolution closed: the pull is refused, and nothing of the project the
// other query grants is served.
func TestGrantQueryFailsClosed(t *testing.T) {
	forEachDriver(t, func(t *testing.T, d e2eDriver) {
		e := newGrantQueryEnv(t, d.open(t), func(c *syncgo.Config) {
			c.GrantQueries = append(c.GrantQueries, syncgo.GrantQuery{Variable: "project_id", MaxValues: 1,
				SQL: "SELECT project_id FROM members WHERE user_id = :actor"})
		})
		admin := e.peer("admin", "adm")
		pushOps(admin, "m", memberOp(t, e, "alice", "p1", false), memberOp(t, e, "alice", "p2", false))
		pushOps(admin, "t", e.pushCommit("x", rtTask{id: "x1", project: "p1"}).Operations...)
		if st, rows := subStatuses(e.peer("alice", "a1"), rtSub("s1", -1, "p1")); st["s1"] != wire.SubRevoked || len(rows["s1"]) != 0 {
			t.Fatalf("alice: s1 %v with rows %v although a grant query failed; want revoked", st["s1"], rows["s1"])
		}
		// bob, with one membership, is served.
		pushOps(admin, "mb", memberOp(t, e, "bob", "p1", false))
		if st, rows := subStatuses(e.peer("bob", "b1"), rtSub("s1", -1, "p1")); st["s1"] != wire.SubActive || len(rows["s1"]) != 1 {
			t.Fatalf("bob: s1 %v with rows %v; want active with x1", st["s1"], rows["s1"])
		}
	})
}

// BenchmarkGrantQueryPull is a caught-up pull over HTTP by an actor whose
// project comes from the members table (grant), or from the host's
// resolver alone (resolver), on each driver: the cost of running the
// grant query at every request.
func BenchmarkGrantQueryPull(b *testing.B) {
	for _, driver := range []string{"sqlite", "postgres"} {
		for _, mode := range []string{"resolver", "grant"} {
			b.Run(driver+"/"+mode, func(b *testing.B) {
				var st store.Store
				if driver == "sqlite" {
					st = rtOpenSQLite(b)
				} else {
					s, err := pgstore.Open(context.Background(), pgstore.Config{URL: pgtest.Schema(b, "grantbench", false), MaxConns: 8})
					if err != nil {
						b.Fatal(err)
					}
					b.Cleanup(func() { _ = s.Close() })
					st = s
				}
				e := newGrantQueryEnv(b, st, func(c *syncgo.Config) {
					if mode == "resolver" {
						c.GrantQueries = nil
						c.ResolveScopes = func(ctx context.Context, req syncgo.ScopeRequest) (map[string][]string, error) {
							m, err := memberResolve(ctx, req)
							if req.ActorID == "alice" {
								m["project_id"] = []string{"p1"}
							}
							return m, err
						}
					}
				})
				admin := e.peer("admin", "adm")
				for i := range 20 {
					pushOps(admin, fmt.Sprintf("m%d", i), memberOp(b, e, fmt.Sprintf("u%d", i), "p1", false))
				}
				pushOps(admin, "m-alice", memberOp(b, e, "alice", "p1", false))
				alice := e.peer("alice", "a1")
				next := alice.pull(rtSub("s1", -1, "p1"))["s1"]
				b.ResetTimer()
				for b.Loop() {
					alice.pull(rtSub("s1", next, "p1"))
				}
			})
		}
	}
}

// BenchmarkGrantQueryFanout1000 is a commit of tasks delivered to 1,000
// sockets, each of its own actor whose project comes from the members
// table (indexed by user), with
// (membership) and without (plain) a commit to the members table right
// before it: the membership commit makes every socket resolve its scopes
// again before the fan-out goes on. ns/op is the wall time from the
// first push to the last socket's delta.
func BenchmarkGrantQueryFanout1000(b *testing.B) {
	const n = 1000
	rtRaiseNoFile(b, 2*n+256)
	for _, driver := range []string{"sqlite", "postgres"} {
		for _, mode := range []string{"plain", "membership"} {
			b.Run(driver+"/"+mode, func(b *testing.B) {
				var st store.Store
				if driver == "sqlite" {
					st = rtOpenSQLite(b)
				} else {
					s, err := pgstore.Open(context.Background(), pgstore.Config{URL: pgtest.Schema(b, "grantfan", false), MaxConns: 8})
					if err != nil {
						b.Fatal(err)
					}
					b.Cleanup(func() { _ = s.Close() })
					st = s
				}
				e := newGrantQueryEnv(b, st, func(c *syncgo.Config) { c.Realtime.ReresolveInterval = -1 })
				e.actorOf = func(clientID string) string { return "a-" + clientID } // one actor a socket
				admin := e.peer("admin", "adm")
				var members []wire.Operation
				for i := range n {
					members = append(members, memberOp(b, e, fmt.Sprintf("a-k%d", i), "p1", false))
				}
				for i := 0; i < n; i += 200 {
					pushOps(admin, fmt.Sprintf("m0-%d", i), members[i:i+200]...)
				}
				socks := e.dialMany(b, e.rtRegister(b, n, "k"))
				b.ResetTimer()
				for i := range b.N {
					if mode == "membership" {
						pushOps(admin, fmt.Sprintf("m%d", i+1), memberOp(b, e, fmt.Sprintf("u%d", i), "p9", false))
					}
					seq := pushOps(admin, fmt.Sprintf("t%d", i), e.pushCommit("x", rtTask{id: fmt.Sprintf("t%d", i), project: "p1"}).Operations...)
					for _, s := range socks {
						if _, next := rtDeltaRows(rtDecodeDelta(b, s.clientID, s.next(rtWait))); next["s"] != seq {
							b.Fatalf("%s: delta through %v; want %d", s.clientID, next, seq)
						}
					}
				}
			})
		}
	}
}

// A pass (the sockets of a partition resolved again after a membership
// commit) reads each grant query for up to 512 actors in one statement on
// Postgres: what it reads is what each actor's own queries read, values,
// dropped values and the MaxValues failure alike; an actor it could not
// read is left to its own query. On SQLite a pass reads nothing ahead.
func TestGrantQueryPass(t *testing.T) {
	forEachDriver(t, func(t *testing.T, d e2eDriver) {
		e := newGrantQueryEnv(t, d.open(t), func(c *syncgo.Config) {
			c.GrantQueries = append(c.GrantQueries,
				// Fails for an actor of more than one project.
				syncgo.GrantQuery{Variable: "project_id", MaxValues: 1, SQL: "SELECT project_id FROM members WHERE user_id = :actor"},
				// NULL and "*" grant nothing.
				syncgo.GrantQuery{Variable: "project_id",
					SQL: "SELECT CASE WHEN user_id = 'u3' THEN NULL WHEN user_id = 'u4' THEN '*' ELSE 'own-' || user_id END FROM members WHERE user_id = :actor"})
		})
		admin := e.peer("admin", "adm")
		var actors []string
		var ops []wire.Operation
		for i := range 600 {
			u := fmt.Sprintf("u%d", i)
			actors = append(actors, u)
			ops = append(ops, memberOp(t, e, u, fmt.Sprintf("p%d", i/2), false)) // two members a project
		}
		for _, u := range []string{"u1", "u5", "u6"} {
			ops = append(ops, memberOp(t, e, u, "p-big", false))
		}
		ops = append(ops, memberOp(t, e, "u0", "p-big", false), memberOp(t, e, "u0", "p-extra", false))
		for i := 0; i < len(ops); i += 200 {
			pushOps(admin, fmt.Sprintf("m%d", i), ops[i:min(i+200, len(ops))]...)
		}
		actors = append(actors, "nobody", "u0", "it's") // a repeat, a quote
		start := time.Now()

		ctx := context.Background()
		pass := e.srv.GrantPassForTest(ctx, rtPartition, actors)
		if d.name == "sqlite" {
			if len(pass) != 0 {
				t.Fatalf("a pass read %d actors ahead on SQLite", len(pass))
			}
			return
		}
		if len(pass) != 602 {
			t.Fatalf("the pass read %d actors; want 602", len(pass))
		}
		t.Logf("pass %v", time.Since(start))
		start = time.Now()
		failed := 0
		for _, u := range slices.Compact(slices.Sorted(slices.Values(actors))) {
			one := e.srv.GrantOneForTest(ctx, rtPartition, u)
			for qi := range 3 {
				got, want := pass[u][qi], one[qi]
				if got.Err != want.Err || !slices.Equal(got.Values, want.Values) {
					t.Fatalf("%s, query %d: the pass read %+v; the actor's own query %+v", u, qi, got, want)
				}
				if got.Err != "" {
					failed++
				}
			}
		}
		t.Logf("one by one %v", time.Since(start))
		if failed != 4 { // u0, u1, u5, u6 are in two projects or more
			t.Fatalf("%d resolutions failed on MaxValues; want 4", failed)
		}
		if v := pass["u0"][0].Values; !slices.Equal(v, []string{"p-big", "p-extra", "p0"}) {
			t.Fatalf("u0's projects %v", v)
		}
		if v := pass["u3"][2].Values; len(v) != 0 {
			t.Fatalf("u3 was granted %v by a NULL", v)
		}
		if v := pass["u4"][2].Values; len(v) != 0 {
			t.Fatalf("u4 was granted %v by a \"*\"", v)
		}
		// A chunk whose statement reaches the row bound is left to the
		// actors' own queries: 512 actors read 512 rows or more.
		e.srv.SetGrantPassRowsForTest(512)
		if pass := e.srv.GrantPassForTest(ctx, rtPartition, actors); len(pass) != 90 {
			t.Fatalf("with 512 rows a statement the pass read %d actors; want the 90 of the second chunk", len(pass))
		}

		// A statement the pass cannot run for many actors (the actor
		// compared with an integer column) leaves them to their own.
		e2 := newGrantQueryEnv(t, d.open(t), func(c *syncgo.Config) {
			c.GrantQueries = []syncgo.GrantQuery{{Variable: "project_id", SQL: "SELECT project_id FROM tasks WHERE rank = :actor"}}
			c.ResolveScopes = func(ctx context.Context, req syncgo.ScopeRequest) (map[string][]string, error) {
				return memberResolve(ctx, syncgo.ScopeRequest{ActorID: map[bool]string{true: "admin"}[req.ActorID == "0"]})
			}
		})
		tasks, _ := e2.schema.Table("tasks")
		payload, err := tasks.RowCodec().AppendSparse(nil, wire.SparseRow{Present: []bool{true, true, true, true, true, true},
			Values: []wire.Value{{Str: "x5"}, {Str: "p5"}, {Str: ""}, {Bool: false}, {Int: 5}, {Null: true}}})
		if err != nil {
			t.Fatal(err)
		}
		pushOps(e2.peer("0", "adm"), "t", wire.Operation{Table: "tasks", RowID: "x5", Op: wire.OpUpsert, Payload: payload})
		if pass := e2.srv.GrantPassForTest(ctx, rtPartition, []string{"5", "6"}); len(pass) != 0 {
			t.Fatalf("the pass read %v comparing text with an integer column", pass)
		}
		if one := e2.srv.GrantOneForTest(ctx, rtPartition, "5"); one[0].Err != "" || !slices.Equal(one[0].Values, []string{"p5"}) {
			t.Fatalf("the actor's own query: %+v; want [p5]", one[0])
		}
	})
}
