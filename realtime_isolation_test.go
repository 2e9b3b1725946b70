package syncgo_test

import (
	"fmt"
	"slices"
	"testing"
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
