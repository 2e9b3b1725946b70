package syncgo_test

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"testing"

	"github.com/syncgo/syncgo/internal/pgtest"
	"github.com/syncgo/syncgo/internal/sspclient"
	"github.com/syncgo/syncgo/pgstore"
	"github.com/syncgo/syncgo/sqlitestore"
	"github.com/syncgo/syncgo/store"
)

// A pull round that only moves the client's cursor may write its client
// record after the response (store.ClientDeferrer); a round that changes
// the subscription list writes it before. Another process on the same
// database (a second store, as a fleet member would open) reads the new
// subscription list as soon as the round returns, the server's own store
// reads the newest cursor at once, and the database holds it once the
// store is closed.
func TestE2EClientRecordWrites(t *testing.T) {
	type twin struct {
		name string
		open func(t *testing.T) (served, other store.Store)
	}
	twins := []twin{
		{"sqlite", func(t *testing.T) (store.Store, store.Store) {
			path := filepath.Join(t.TempDir(), "sync.db")
			open := func() store.Store {
				s, err := sqlitestore.Open(context.Background(), sqlitestore.Config{Path: path})
				if err != nil {
					t.Fatalf("sqlitestore.Open: %v", err)
				}
				t.Cleanup(func() { _ = s.Close() })
				return s
			}
			return open(), open()
		}},
		{"postgres", func(t *testing.T) (store.Store, store.Store) {
			url := pgtest.Schema(t, "syncgo_e2e", false)
			open := func() store.Store {
				s, err := pgstore.Open(context.Background(), pgstore.Config{URL: url, MaxConns: 8})
				if err != nil {
					t.Fatalf("pgstore.Open: %v", err)
				}
				t.Cleanup(func() { _ = s.Close() })
				return s
			}
			return open(), open()
		}},
	}
	for _, tw := range twins {
		t.Run(tw.name, func(t *testing.T) {
			t.Parallel()
			var other store.Store
			e := newE2EEnv(t, e2eDriver{name: tw.name, open: func(t *testing.T) store.Store {
				s, o := tw.open(t)
				other = o
				return s
			}})
			ctx := context.Background()
			c := e.client("alice", sspclient.Options{})
			subIDs := func(s store.Store) []string {
				t.Helper()
				rec, err := s.Client(ctx, e2ePartition, c.ClientID())
				if err != nil {
					t.Fatalf("Client: %v", err)
				}
				var ids []string
				for _, sub := range rec.Subscriptions {
					ids = append(ids, sub.ID)
				}
				return ids
			}
			cursor := func(s store.Store) int64 {
				t.Helper()
				rec, err := s.Client(ctx, e2ePartition, c.ClientID())
				if err != nil {
					t.Fatalf("Client: %v", err)
				}
				return rec.Cursor
			}

			mustSubscribe(t, c, "tasks-p1", "p1")
			syncQuiet(t, c)
			if got := subIDs(other); !slices.Equal(got, []string{"tasks-p1"}) {
				t.Fatalf("subscriptions read by another process after the first pull = %v; want [tasks-p1]", got)
			}
			for i := range 5 {
				// The record keeps the cursor the round's request sent (the
				// client holds it), not the one its response answers.
				sent := e.partitionState().MaxCommitSeq
				mustUpsert(t, c, taskRow(fmt.Sprintf("t%d", i), "p1", "round"))
				if _, err := c.Round(ctx); err != nil {
					t.Fatal(err)
				}
				if got := cursor(e.store); got != sent {
					t.Fatalf("round %d: the server's store reads cursor %d; want %d", i, got, sent)
				}
			}
			mustSubscribe(t, c, "tasks-p2", "p2")
			if _, err := c.Round(ctx); err != nil {
				t.Fatal(err)
			}
			if got := subIDs(other); !slices.Equal(got, []string{"tasks-p1", "tasks-p2"}) {
				t.Fatalf("subscriptions read by another process after the round = %v; want [tasks-p1 tasks-p2]", got)
			}
			var want int64
			for i := range 3 {
				want = e.partitionState().MaxCommitSeq
				mustUpsert(t, c, taskRow(fmt.Sprintf("u%d", i), "p1", "round"))
				if _, err := c.Round(ctx); err != nil {
					t.Fatal(err)
				}
			}
			if err := e.srv.Stop(ctx); err != nil {
				t.Fatal(err)
			}
			if err := e.store.Close(); err != nil {
				t.Fatal(err)
			}
			if got := cursor(other); got != want {
				t.Errorf("cursor read by another process after Close = %d; want %d", got, want)
			}
		})
	}
}
