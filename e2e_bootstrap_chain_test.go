package syncgo_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/syncgo/syncgo"
	"github.com/syncgo/syncgo/internal/sspclient"
	"github.com/syncgo/syncgo/store"
)

// chainingStore counts a bootstrap's page reads and boundary walks, runs
// a hook once right after the read of page afterRead, and chains pages
// (store.PageChainer) when forced to or when the store it wraps does.
type chainingStore struct {
	store.Store
	force     bool
	reads     atomic.Int64
	walks     atomic.Int64
	afterRead int64
	once      sync.Once
	hook      func()
}

func (s *chainingStore) ChainPages() bool {
	c, ok := s.Store.(store.PageChainer)
	return s.force || ok && c.ChainPages()
}

func (s *chainingStore) PageBoundaries(ctx context.Context, partition string, q store.RowScanQuery, pages int) ([]string, error) {
	s.walks.Add(1)
	return s.Store.PageBoundaries(ctx, partition, q, pages)
}

func (s *chainingStore) VisitRows(ctx context.Context, partition string, q store.RowScanQuery, visit func(r *store.Row) bool) error {
	var err error
	if v, ok := s.Store.(store.RowVisitor); ok {
		err = v.VisitRows(ctx, partition, q, visit)
	} else {
		var rows []store.Row
		if rows, err = s.Store.ScanRows(ctx, partition, q); err == nil {
			store.VisitEach(rows, visit)
		}
	}
	if err == nil && q.Table == "tasks" && s.reads.Add(1) == s.afterRead && s.hook != nil {
		s.once.Do(s.hook)
	}
	return err
}

// A bootstrap on a store that chains its pages reads each page from the
// end of the one before, ahead of the response, and walks no boundaries;
// rows written while the chain runs (into a page already read, into a
// later one, a later row deleted, one updated) leave the client with the
// server's rows, and no page holds more than limitSnapshotRows. Postgres
// chains its pages itself; SQLite is made to here.
func TestE2EBootstrapChainRacesWrites(t *testing.T) {
	forEachDriver(t, func(t *testing.T, d e2eDriver) {
		var cs *chainingStore
		e := newE2EEnv(t, d, func(c *syncgo.Config) {
			cs = &chainingStore{Store: c.Store, force: d.name != "postgres", afterRead: 2}
			c.Store = cs
		})
		w := e.client("writer", sspclient.Options{})
		for i := range 30 {
			mustUpsert(t, w, taskRow(fmt.Sprintf("t%02d", i), "p1", "row"))
		}
		mustUpsert(t, w, taskRow("o1", "p2", "other scope"))
		syncQuiet(t, w)
		cs.reads.Store(0)
		cs.hook = writeDuringBootstrap(t, w, []string{"t02a", "t12a", "t29a"}, "t20", "t25")
		c := e.client("alice", sspclient.Options{LimitSnapshotRows: 5, MaxSnapshotPages: 20})
		mustSubscribe(t, c, "tasks-p1", "p1")
		// The bootstrap's round, then the commits after its asOf (the
		// row written into a page already read comes only by them).
		pages := checkRacedBootstrap(t, e, c, append(syncQuiet(t, c), syncQuiet(t, c)...), 32)
		if n := cs.walks.Load(); n != 0 {
			t.Fatalf("the bootstrap walked page boundaries %d times, want a chain", n)
		}
		if n := cs.reads.Load(); n < 6 || pages < 6 {
			t.Fatalf("%d page reads and %d pages, want at least 6 of 5 rows", n, pages)
		}
	})
}
