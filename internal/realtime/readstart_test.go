package realtime

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/syncgo/syncgo/internal/engine"
	"github.com/syncgo/syncgo/store"
)

// plainStore hides the driver's optional interfaces (RequestStateReader
// among them): what a store of an embedder's own may offer.
type plainStore struct{ store.Store }

// TestReadStartPaths: a socket's start reads the client record and the
// partition in one request-state read when the store offers it, and in
// two reads otherwise; both answer alike for a known client, an unknown
// client of a known partition and an unknown partition.
func TestReadStartPaths(t *testing.T) {
	ctx := context.Background()
	st, sc := testStore(t)
	part, err := st.TouchPartition(ctx, "p", 1000, "e")
	if err != nil {
		t.Fatal(err)
	}
	if err := st.PutClient(ctx, "p", store.ClientRecord{ClientID: "c1", ActorID: "a", WireVersion: 3,
		Cursor: 7, UpdatedAtMs: 1000}); err != nil {
		t.Fatal(err)
	}
	if _, ok := store.Store(st).(store.RequestStateReader); !ok {
		t.Fatal("sqlitestore no longer reads request states: the shared path is untested")
	}
	hubs := map[string]*Hub{}
	for name, s := range map[string]store.Store{"shared": st, "two reads": plainStore{st}} {
		h := NewHub(Config{Engine: engine.New(engine.Config{Store: s, Schema: sc}), Store: s,
			WriteTimeout: time.Second, AckFlush: time.Hour})
		t.Cleanup(h.Close)
		hubs[name] = h
	}
	for name, h := range hubs {
		rec, p, err := h.readStart(ctx, "p", "c1")
		if err != nil || rec.ClientID != "c1" || rec.ActorID != "a" || rec.Cursor != 7 || rec.WireVersion != 3 {
			t.Errorf("%s: known client: %+v, %v", name, rec, err)
		}
		if p.ID != "p" || p.LogEpoch != part.LogEpoch {
			t.Errorf("%s: known client's partition: %+v, want %+v", name, p, part)
		}
		rec, p, err = h.readStart(ctx, "p", "nobody")
		if !errors.Is(err, store.ErrNotFound) || rec.ClientID != "" {
			t.Errorf("%s: unknown client: %+v, %v; want ErrNotFound", name, rec, err)
		}
		if p.LogEpoch != part.LogEpoch {
			t.Errorf("%s: unknown client's partition: %+v, want %+v", name, p, part)
		}
		rec, p, err = h.readStart(ctx, "elsewhere", "c1")
		if !errors.Is(err, store.ErrNotFound) || rec.ClientID != "" || p.LogEpoch != "" {
			t.Errorf("%s: unknown partition: %+v, %+v, %v; want ErrNotFound", name, rec, p, err)
		}
	}
}
