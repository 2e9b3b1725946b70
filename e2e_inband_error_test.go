package syncgo_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/syncgo/syncgo"
	"github.com/syncgo/syncgo/internal/sspclient"
	"github.com/syncgo/syncgo/store"
	"github.com/syncgo/syncgo/syncerr"
	"github.com/syncgo/syncgo/wire"
)

// faultyStore fails row scans inside one scope value on demand.
type faultyStore struct {
	store.Store
	failScope atomic.Pointer[string]
}

var errInjected = errors.New("injected storage failure")

func (f *faultyStore) ScanRows(ctx context.Context, partition string, q store.RowScanQuery) ([]store.Row, error) {
	if v := f.failScope.Load(); v != nil {
		for _, sc := range q.Scopes {
			for _, val := range sc.Values {
				if val == *v {
					return nil, errInjected
				}
			}
		}
	}
	return f.Store.ScanRows(ctx, partition, q)
}

// A failure after the response began is an in-band ERROR frame (§1.6):
// the round's push result and the completed first subscription stay
// applied, the second subscription, open when the ERROR came, persists
// nothing (§1.4 rule 5), the client reports sync.internal_error, the host
// hook sees the cause, and the next round recovers.
func TestE2EInBandErrorAbortsOpenSection(t *testing.T) {
	forEachDriver(t, func(t *testing.T, d e2eDriver) {
		var fs *faultyStore
		hooked := make(chan error, 8) // OnError runs after the response is written
		e := newE2EEnv(t, d, func(c *syncgo.Config) {
			fs = &faultyStore{Store: c.Store}
			c.Store = fs
			c.OnError = func(err error, route string) {
				if route == "sync" {
					hooked <- err
				}
			}
		})
		w := e.client("writer", sspclient.Options{})
		mustUpsert(t, w, taskRow("a1", "p1", "a1"))
		mustUpsert(t, w, taskRow("b1", "p2", "b1"))
		syncQuiet(t, w)

		c := e.client("alice", sspclient.Options{})
		mustSubscribe(t, c, "tasks-p1", "p1")
		mustSubscribe(t, c, "tasks-p2", "p2")
		syncQuiet(t, c) // acquires the epoch and bootstraps both
		mustUpsert(t, w, taskRow("a2", "p1", "a2"))
		syncQuiet(t, w)
		c.Unsubscribe("tasks-p2")
		mustSubscribe(t, c, "tasks-p2b", "p2") // a new subscription: it bootstraps
		push := mustUpsert(t, c, taskRow("a3", "p1", "pushed in the failing round"))

		p2 := "p2"
		fs.failScope.Store(&p2)
		res, err := c.Round(context.Background())
		var pe *syncerr.Error
		if !errors.As(err, &pe) || pe.Code != syncerr.CodeInternalError {
			t.Fatalf("round with a mid-stream failure: %v; want the in-band %s", err, syncerr.CodeInternalError)
		}
		var he *sspclient.HTTPError
		if errors.As(err, &he) {
			t.Fatalf("the failure came as HTTP %d, want an ERROR frame in a 200 response", he.StatusCode)
		}
		if o := pushed(t, res, push); o.Status != wire.PushApplied {
			t.Fatalf("the push before the failure: %s, want applied", statusOf(o))
		}
		if s := sectionOf(t, res, "tasks-p1"); !s.Complete || s.Commits == 0 {
			t.Fatalf("the first section: %+v; want it complete with commits", s)
		}
		if s := sectionOf(t, res, "tasks-p2b"); s.Complete {
			t.Fatal("the section open at the ERROR frame completed")
		}
		if st, _ := c.Subscription("tasks-p2b"); st.Cursor != -1 || st.BootstrapState != nil || st.Status != 0 {
			t.Fatalf("the aborted subscription persisted cursor %d token %v status %s", st.Cursor, st.BootstrapState, st.Status)
		}
		select {
		case err := <-hooked:
			if !errors.Is(err, errInjected) {
				t.Fatalf("OnError saw %v; want the injected failure", err)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("OnError was not called")
		}

		fs.failScope.Store(nil)
		syncQuiet(t, c)
		sameRows(t, "client vs server", clientRows(t, c, "tasks"), e.serverRows("tasks"))
		if len(hooked) != 0 {
			t.Fatalf("OnError was called again: %v", <-hooked)
		}
		if e.partitionState().MaxCommitSeq != 4 {
			t.Fatalf("MaxCommitSeq %d, want 4 (the push applied once)", e.partitionState().MaxCommitSeq)
		}
	})
}
