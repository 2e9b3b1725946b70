package syncgo_test

import (
	"fmt"
	"slices"
	"testing"

	"github.com/syncgo/syncgo/wire"
)

// Scope isolation of realtime deltas: a socket receives the rows of its
// own effective scopes only, whatever the registrations of the other
// sockets of the partition.

// Two sockets whose registrations differ only in how their scope values
// split (one holds the projects "a" and "b", the other the single project
// "a\x02b") must not share a delta: the delta cache is keyed by the
// registrations, and that key must tell the two apart. Before the fix
// the key joined the values with a separator byte that a value may
// contain, so a commit of project "a" reached the socket that holds only
// "a\x02b", or never reached the one that holds "a".
func TestRealtimeDeltaCacheKeyTellsScopeValuesApart(t *testing.T) {
	forEachDriver(t, func(t *testing.T, d e2eDriver) {
		const odd = "a\x02b"
		g := &rtGrants{}
		g.set("xavier", "a", "b")
		g.set("yves", odd)
		e := newGrantEnv(t, d.open(t), g)
		e.peer("xavier", "x1").pull(rtSub("s", -1, "a", "b"))
		e.peer("yves", "y1").pull(rtSub("s", -1, odd))
		xs := e.dial("xavier", "x1")
		ys := e.dial("yves", "y1")
		for _, s := range []*rtSock{xs, ys} {
			if h := s.hello(); h.RequiresSync {
				t.Fatalf("%s: hello %+v: the registrations did not load", s.clientID, h)
			}
		}
		bob := e.peer("bob", "b1")
		// The fan-out visits the sockets in no fixed order; a few commits
		// make either outcome of a shared cache entry show. Each socket's
		// next delta must be the row of its own scope just pushed.
		for i := range 7 {
			a := fmt.Sprintf("in-a-%d", i)
			bob.push("c"+a, rtTask{id: a, project: "a"})
			m, ok := xs.tryNext(rtWait)
			if !ok {
				t.Fatalf("commit %d: xavier (projects a, b) got no delta of row %s of project a", i, a)
			}
			if rows, _ := rtDeltaRows(rtDecodeDelta(t, "x1", m)); !slices.Equal(rows, []string{a}) {
				t.Fatalf("commit %d: xavier (projects a, b) got a delta of rows %v; want [%s]", i, rows, a)
			}
			if i == 6 {
				break
			}
			y := fmt.Sprintf("in-odd-%d", i)
			bob.push("c"+y, rtTask{id: y, project: odd})
			if rows, _ := rtDeltaRows(ys.delta()); !slices.Equal(rows, []string{y}) {
				t.Fatalf("commit %d: yves (project %q only) got a delta of rows %v; want [%s] (row %s is in project a)", i, odd, rows, y, a)
			}
		}
	})
}

// One commit writes rows of three projects; a socket that holds two of
// them, each in its own subscription, gets one delta with a section per
// subscription and only its own rows: never the row of the third.
func TestRealtimeDeltaOfCommitAcrossScopes(t *testing.T) {
	forEachDriver(t, func(t *testing.T, d e2eDriver) {
		g := &rtGrants{}
		g.set("alice", "p1", "p3")
		e := newGrantEnv(t, d.open(t), g)
		e.peer("alice", "a1").pull(rtSub("s1", -1, "p1"), rtSub("s3", -1, "p3"))
		s := e.dial("alice", "a1")
		if h := s.hello(); h.RequiresSync {
			t.Fatalf("hello %+v: the registrations did not load", h)
		}
		seq := e.peer("bob", "b1").push("c-all",
			rtTask{id: "x1", project: "p1"}, rtTask{id: "x2", project: "p2"}, rtTask{id: "x3", project: "p3"})
		m := s.delta()
		rows, next := rtDeltaRows(m)
		slices.Sort(rows)
		if !slices.Equal(rows, []string{"x1", "x3"}) || len(next) != 2 || next["s1"] != seq || next["s3"] != seq {
			t.Fatalf("delta rows %v, cursors %v; want x1 and x3 only, s1 and s3 at %d", rows, next, seq)
		}
		sections := map[string][]string{}
		cur := ""
		for _, f := range m.Frames {
			switch f := f.(type) {
			case *wire.SubStart:
				cur = f.ID
			case *wire.Commit:
				for _, ch := range f.Changes {
					sections[cur] = append(sections[cur], ch.RowID)
				}
			}
		}
		if !slices.Equal(sections["s1"], []string{"x1"}) || !slices.Equal(sections["s3"], []string{"x3"}) {
			t.Fatalf("delta sections %v; want s1 [x1] and s3 [x3]", sections)
		}
	})
}
