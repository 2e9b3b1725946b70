package storetest

import (
	"bytes"
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"

	"github.com/syncgo/syncgo/store"
	"github.com/syncgo/syncgo/wire"
)

// SameCommits reports whether two windows' commits are the same: every
// field of each commit and of each of its changes.
func SameCommits(a, b []store.Commit) bool {
	return slices.EqualFunc(a, b, func(x, y store.Commit) bool {
		return x.Seq == y.Seq && x.CreatedAtMs == y.CreatedAtMs && x.ActorID == y.ActorID && x.ClientID == y.ClientID &&
			x.ClientCommitID == y.ClientCommitID && slices.EqualFunc(x.Changes, y.Changes, func(u, v store.Change) bool {
			return u.Table == v.Table && u.RowID == v.RowID && u.Op == v.Op && u.RowVersion == v.RowVersion &&
				slices.Equal(u.Scopes, v.Scopes) && bytes.Equal(u.Payload, v.Payload) && (u.Payload == nil) == (v.Payload == nil)
		})
	})
}

// CommitsString renders a window's commits for a failure message:
// "seq:row/op,... " per commit.
func CommitsString(cs []store.Commit) string {
	var b bytes.Buffer
	for _, c := range cs {
		fmt.Fprintf(&b, "%d:", c.Seq)
		for _, ch := range c.Changes {
			fmt.Fprintf(&b, "%s/%d,", ch.RowID, ch.Op)
		}
		b.WriteByte(' ')
	}
	return b.String()
}

// WindowAsk is a window query and the window it read alone.
type WindowAsk struct {
	Q    store.CommitWindowQuery
	Want store.CommitWindow
}

// WindowAsks are short window queries of table over the log up to
// through, for each of scopes: from every stride-th sequence, 1, 5 and 20
// commits long, with change limits 0, 1 and 2, the state after read at
// running; each with what alone reads for it.
func WindowAsks(t *testing.T, table string, scopes []wire.ScopeMap, through, stride int64, running int32, alone func(store.CommitWindowQuery) (store.CommitWindow, error)) []WindowAsk {
	t.Helper()
	var asks []WindowAsk
	for _, sc := range scopes {
		for after := int64(0); after < through; after += stride {
			for _, n := range []int64{1, 5, 20} {
				for _, limit := range []int{0, 1, 2} {
					q := store.CommitWindowQuery{Table: table, Scopes: sc, AfterSeq: after,
						ThroughSeq: min(through, after+n), LimitChanges: limit, StateAfter: true, Running: running}
					want, err := alone(q)
					if err != nil {
						t.Fatal(err)
					}
					asks = append(asks, WindowAsk{Q: q, Want: want})
				}
			}
		}
	}
	return asks
}

// CheckSharedWindows asks every query of asks at once through read, in
// rounds (at least three, until shared reports an answer of a shared
// read, at most 50), and checks that each gets what it got alone: the
// same commits and changes, completeness and state after. It fails the
// test when no read was answered by a shared read.
func CheckSharedWindows(t *testing.T, asks []WindowAsk, read func(context.Context, store.CommitWindowQuery) (store.CommitWindow, error), shared func() int64) {
	t.Helper()
	for round := 0; round < 50 && (round < 3 || shared() == 0); round++ {
		start := make(chan struct{})
		var wg sync.WaitGroup
		for _, a := range asks {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				got, err := read(t.Context(), a.Q)
				switch {
				case err != nil:
					t.Error(err)
				case got.Complete != a.Want.Complete || !SameCommits(got.Commits, a.Want.Commits):
					t.Errorf("%+v: got %s (complete %v), alone %s (complete %v)", a.Q,
						CommitsString(got.Commits), got.Complete, CommitsString(a.Want.Commits), a.Want.Complete)
				case got.State == nil || a.Want.State == nil || got.State.Partition != a.Want.State.Partition ||
					got.State.Gate.StoredSchemaVersion != a.Want.State.Gate.StoredSchemaVersion:
					t.Errorf("%+v: state %v, alone %v", a.Q, got.State, a.Want.State)
				}
			}()
		}
		close(start)
		wg.Wait()
	}
	t.Logf("%d reads, %d answers of shared reads", len(asks), shared())
	if shared() == 0 {
		t.Fatal("no read was answered by a shared read")
	}
}
