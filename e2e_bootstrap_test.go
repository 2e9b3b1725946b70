package syncgo_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/syncgo/syncgo/internal/sspclient"
	"github.com/syncgo/syncgo/wire"
)

// A bootstrap interrupted mid-way resumes (§1.4 rule 5, §4.7): 250 rows in
// pages of 20, three pages a round. The third round's body is cut in the
// middle of its second segment: the client applies the first segment (a
// block is its own transaction), reports the truncation, and persists no
// SUB_END. The next round resends the token the cut round carried, and the
// bootstrap completes with the server's rows.
func TestE2EInterruptedBootstrapResumes(t *testing.T) {
	forEachDriver(t, func(t *testing.T, d e2eDriver) {
		e := newE2EEnv(t, d)
		w := e.client("writer", sspclient.Options{})
		if _, err := w.Mutate(func(tx *sspclient.Tx) error {
			for i := range 250 {
				if err := tx.Upsert("tasks", taskRow(fmt.Sprintf("t%03d", i), "p1", fmt.Sprintf("task %d", i))); err != nil {
					return err
				}
			}
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		syncQuiet(t, w)

		const cutRound = 3 // counting the epoch acquisition as round 1
		ht := newHookTransport(func(x *exchange) ([]byte, error) {
			if x.n != cutRound {
				return nil, nil
			}
			var segs []frameSpan
			for _, f := range frameSpans(x.body) {
				if f.typ == wire.FrameSegmentInline {
					segs = append(segs, f)
				}
			}
			if len(segs) < 2 {
				return nil, fmt.Errorf("round %d carried %d segments, want at least 2", x.n, len(segs))
			}
			cut := (segs[1].start + segs[1].end) / 2
			return x.body[:cut], nil
		})
		r := e.client("reader", sspclient.Options{HTTPClient: ht.client(), AcceptEncoding: "identity",
			LimitSnapshotRows: 20, MaxSnapshotPages: 3})
		mustSubscribe(t, r, "tasks-p1", "p1")
		for range cutRound - 1 {
			if _, err := r.Round(context.Background()); err != nil {
				t.Fatal(err)
			}
		}
		before, _ := r.Subscription("tasks-p1")
		rowsBefore := len(r.Rows("tasks"))
		if before.BootstrapState == nil || rowsBefore != 60 {
			t.Fatalf("before the cut round: token %v, %d rows; want a token and 60 rows", before.BootstrapState, rowsBefore)
		}

		res, err := r.Round(context.Background())
		if err == nil {
			t.Fatal("the truncated round succeeded")
		}
		if len(res.Sections) != 1 || res.Sections[0].Complete {
			t.Fatalf("truncated round sections: %+v; want one incomplete section", res.Sections)
		}
		after, _ := r.Subscription("tasks-p1")
		if after.Cursor != before.Cursor || after.BootstrapState == nil || *after.BootstrapState != *before.BootstrapState {
			t.Fatalf("the truncated round moved the subscription: cursor %d→%d, token %v→%v",
				before.Cursor, after.Cursor, *before.BootstrapState, after.BootstrapState)
		}
		if got := len(r.Rows("tasks")); got != rowsBefore+20 {
			t.Fatalf("after the cut the client holds %d rows, want %d (the first segment applied)", got, rowsBefore+20)
		}

		syncQuiet(t, r)
		xs := ht.recorded()
		cut, next := xs[cutRound-1].req.Subscriptions[0], xs[cutRound].req.Subscriptions[0]
		if next.BootstrapState == nil || *next.BootstrapState != *cut.BootstrapState || next.Cursor != cut.Cursor {
			t.Fatalf("the round after the cut sent cursor %d token %v; want the persisted cursor %d token %s",
				next.Cursor, next.BootstrapState, cut.Cursor, *cut.BootstrapState)
		}
		// The acquisition, 250 rows at 60 a round (5 rounds), and the
		// repeated cut round.
		if len(xs) != 7 {
			t.Fatalf("the sync took %d rounds, want 7 (no restart from scratch)", len(xs))
		}
		sameRows(t, "reader vs server", clientRows(t, r, "tasks"), e.serverRows("tasks"))
	})
}
