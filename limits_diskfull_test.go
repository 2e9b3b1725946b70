package syncgo_test

import (
	"context"
	"fmt"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/syncgo/syncgo"
	"github.com/syncgo/syncgo/internal/sspclient"
	"github.com/syncgo/syncgo/store"
	"github.com/syncgo/syncgo/syncerr"
	"github.com/syncgo/syncgo/wire"
)

type barrierStore interface {
	store.Store
	store.Barrier
}

// fullStore fails every write of the request path the way a full disk
// does (sqlitestore reports SQLITE_FULL as store.ErrStorageFull), while
// reads go through.
type fullStore struct {
	barrierStore
	full atomic.Bool
}

var errDiskFull = fmt.Errorf("%w: database or disk is full (simulated)", store.ErrStorageFull)

func (f *fullStore) TouchPartition(ctx context.Context, partition string, nowMs int64, newEpoch string) (store.Partition, error) {
	if f.full.Load() {
		return store.Partition{}, errDiskFull
	}
	return f.barrierStore.TouchPartition(ctx, partition, nowMs, newEpoch)
}

func (f *fullStore) Write(ctx context.Context, partition string, fn func(ctx context.Context, tx store.WriteTx) error) error {
	if f.full.Load() {
		return errDiskFull
	}
	return f.barrierStore.Write(ctx, partition, fn)
}

func (f *fullStore) PutClient(ctx context.Context, partition string, rec store.ClientRecord) error {
	if f.full.Load() {
		return errDiskFull
	}
	return f.barrierStore.PutClient(ctx, partition, rec)
}

func (f *fullStore) BindClient(ctx context.Context, partition string, rec store.ClientRecord) (store.ClientRecord, error) {
	if f.full.Load() {
		return store.ClientRecord{}, errDiskFull
	}
	return f.barrierStore.BindClient(ctx, partition, rec)
}

func (f *fullStore) AdvanceClientCursor(ctx context.Context, partition string, a store.CursorAdvance) (bool, error) {
	if f.full.Load() {
		return false, errDiskFull
	}
	return f.barrierStore.AdvanceClientCursor(ctx, partition, a)
}

// With the storage full, pulls keep working (an existing client's and a
// new client's) and a push answers a clear retryable error, writing
// nothing (issue 15, finding 10).
func TestStorageFullReadsKeepWorking(t *testing.T) {
	forEachDriver(t, func(t *testing.T, d e2eDriver) {
		var fs *fullStore
		e := newE2EEnv(t, d, func(c *syncgo.Config) {
			fs = &fullStore{barrierStore: c.Store.(barrierStore)}
			c.Store = fs
			c.Limits.TouchInterval = time.Millisecond // every request would write the touch
		})
		e.allow("alice", map[string][]string{"project_id": {"*"}})
		e.allow("bob", map[string][]string{"project_id": {"*"}})
		alice := e.client("alice", sspclient.Options{})
		mustSubscribe(t, alice, "a", "p1")
		mustUpsert(t, alice, taskRow("t1", "p1", "before"))
		syncQuiet(t, alice)
		bob := e.client("bob", sspclient.Options{})
		mustSubscribe(t, bob, "b", "p1")
		syncQuiet(t, bob)

		fs.full.Store(true)
		time.Sleep(5 * time.Millisecond) // past the touch interval

		if _, err := bob.SyncUntilQuiet(context.Background(), 5); err != nil {
			t.Fatalf("an incremental pull with the storage full: %v", err)
		}
		carol := e.client("bob", sspclient.Options{})
		mustSubscribe(t, carol, "c", "p1")
		if _, err := carol.SyncUntilQuiet(context.Background(), 5); err != nil {
			t.Fatalf("a new client's bootstrap with the storage full: %v", err)
		}
		if got := clientRows(t, carol, "tasks"); len(got) != 1 {
			t.Fatalf("bootstrap with the storage full: %v", got)
		}

		epoch := e.partitionState().LogEpoch
		before := e.snapshot(t, "x", "c1")
		r := e.post(t, body(encodeRequest(t, &wire.Request{Version: wire.Version3,
			Header:  &wire.ReqHeader{ClientID: "x", SchemaVersion: 1, LogEpoch: &epoch},
			Commits: []*wire.PushCommit{{ClientCommitID: "c1", Operations: []wire.Operation{e.upsertOp(t, taskRow("t2", "p1", "full"))}}}})), nil)
		wantJSONError(t, r, http.StatusServiceUnavailable, syncerr.CodeInternalError)
		if pe, _ := syncerr.ParseJSON(r.body); !pe.Entry().Retryable || pe.Message == "internal server error" {
			t.Fatalf("a push on a full storage: %s; want a retryable error that says the storage is full", r.body)
		}
		if after := e.snapshot(t, "x", "c1"); !after.equal(before) {
			t.Fatalf("a refused push changed the database: %+v -> %+v", before, after)
		}

		fs.full.Store(false)
		mustUpsert(t, alice, taskRow("t3", "p1", "after"))
		syncQuiet(t, alice)
		syncQuiet(t, bob)
		if got := clientRows(t, bob, "tasks"); len(got) != 2 {
			t.Fatalf("after space was freed: %v", got)
		}
	})
}
