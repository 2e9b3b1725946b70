package engine

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/syncgo/syncgo/internal/sqliteimage"
	"github.com/syncgo/syncgo/store"
	"github.com/syncgo/syncgo/wire"
)

// TestImageIndexDetachedBuild: a requester that gives up cancels neither
// the build nor the requesters waiting on it (§5.3 coalescing).
func TestImageIndexDetachedBuild(t *testing.T) {
	t.Parallel()
	var x imageIndex
	key := imageKey{partition: "p", table: "tasks", digest: "d", asOf: 7}
	started, release := make(chan struct{}), make(chan struct{})
	var builds atomic.Int64
	buildErr := make(chan error, 1)
	build := func(ctx context.Context) (imageRef, error) {
		builds.Add(1)
		close(started)
		<-release
		buildErr <- ctx.Err()
		return imageRef{id: "sha256:img", rowCount: 3, expiresAtMs: 1000}, nil
	}

	leaderCtx, cancelLeader := context.WithCancel(context.Background())
	leader := make(chan error, 1)
	go func() {
		_, err := x.get(leaderCtx, key, 0, build)
		leader <- err
	}()
	<-started
	waiter := make(chan imageRef, 1)
	var wg sync.WaitGroup
	wg.Go(func() {
		ref, err := x.get(context.Background(), key, 0, func(context.Context) (imageRef, error) {
			t.Error("a second build started for a key in flight")
			return imageRef{}, nil
		})
		if err != nil {
			t.Errorf("waiter: %v", err)
		}
		waiter <- ref
	})
	cancelLeader()
	if err := <-leader; !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled leader = %v, want context.Canceled", err)
	}
	close(release)
	wg.Wait()
	if err := <-buildErr; err != nil {
		t.Errorf("the build's context ended with its requester: %v", err)
	}
	if ref := <-waiter; ref.id != "sha256:img" {
		t.Errorf("waiter got %+v", ref)
	}
	if builds.Load() != 1 {
		t.Errorf("%d builds, want 1", builds.Load())
	}
	if ref, ok := x.lookup(key, 999); !ok || ref.id != "sha256:img" {
		t.Errorf("lookup before expiry = %+v, %v", ref, ok)
	}
	if _, ok := x.lookup(key, 1000); ok {
		t.Error("lookup at expiry found the image")
	}
}

// TestImageIndexAbandonedBuildCompletes: when every requester gives up,
// the build still finishes and serves the next request.
func TestImageIndexAbandonedBuildCompletes(t *testing.T) {
	t.Parallel()
	var x imageIndex
	key := imageKey{table: "tasks"}
	release, done := make(chan struct{}), make(chan struct{})
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err := x.get(ctx, key, 0, func(context.Context) (imageRef, error) {
		defer close(done)
		<-release
		return imageRef{id: "a", expiresAtMs: 10}, nil
	})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("get = %v, want context.Canceled", err)
	}
	close(release)
	<-done
	ref, err := x.get(context.Background(), key, 0, func(context.Context) (imageRef, error) {
		t.Error("rebuilt an image whose build was abandoned")
		return imageRef{}, nil
	})
	if err != nil || ref.id != "a" {
		t.Errorf("get after the abandoned build = %+v, %v", ref, err)
	}
}

// TestImageIndexFailureAndExpiry: a failed build is not remembered, and an
// expired image is rebuilt.
func TestImageIndexFailureAndExpiry(t *testing.T) {
	t.Parallel()
	var x imageIndex
	key := imageKey{table: "tasks"}
	boom := errors.New("scan failed")
	if _, err := x.get(context.Background(), key, 0, func(context.Context) (imageRef, error) { return imageRef{}, boom }); !errors.Is(err, boom) {
		t.Fatalf("get = %v, want the build error", err)
	}
	n := 0
	build := func(context.Context) (imageRef, error) {
		n++
		return imageRef{id: fmt.Sprint("img-", n), expiresAtMs: 100 * int64(n)}, nil
	}
	if ref, err := x.get(context.Background(), key, 0, build); err != nil || ref.id != "img-1" {
		t.Fatalf("get after a failure = %+v, %v", ref, err)
	}
	if ref, _ := x.get(context.Background(), key, 99, build); ref.id != "img-1" {
		t.Errorf("get before expiry = %s, want img-1", ref.id)
	}
	if ref, _ := x.get(context.Background(), key, 100, build); ref.id != "img-2" {
		t.Errorf("get at expiry = %s, want a rebuilt img-2", ref.id)
	}
	x.extend(key, "img-2", 500)
	if ref, ok := x.lookup(key, 499); !ok || ref.expiresAtMs != 500 {
		t.Errorf("lookup after extend = %+v, %v", ref, ok)
	}
	x.forget(key, "img-1") // another image: kept
	if _, ok := x.lookup(key, 0); !ok {
		t.Error("forget of another id dropped the entry")
	}
	x.forget(key, "img-2")
	if _, ok := x.lookup(key, 0); ok {
		t.Error("forget kept the entry")
	}
}

// TestImageIndexBounded: the index never holds more than imageIndexMax
// entries.
func TestImageIndexBounded(t *testing.T) {
	t.Parallel()
	var x imageIndex
	for i := range imageIndexMax + 100 {
		key := imageKey{table: "tasks", asOf: int64(i)}
		if _, err := x.get(context.Background(), key, 0, func(context.Context) (imageRef, error) {
			return imageRef{id: fmt.Sprint(i), expiresAtMs: 1 << 40}, nil
		}); err != nil {
			t.Fatal(err)
		}
	}
	x.mu.Lock()
	n := len(x.entries)
	x.mu.Unlock()
	if n > imageIndexMax {
		t.Errorf("index holds %d entries, over %d", n, imageIndexMax)
	}
}

// TestBuildImageBatches: a build of more rows than the probe and two scan
// batches (the scanner reuses a batch's memory once the builder is done
// with it) holds every row once, in key order, with its values.
func TestBuildImageBatches(t *testing.T) {
	const total = 15_000 // the probe's 1,001 rows, then seven batches: more than the scanner keeps
	ctx := context.Background()
	st, sc := seedBenchTasks(t, total)
	e := New(Config{Store: st, Schema: sc, Segments: NewMemorySegments(1 << 30)})
	tbl, _ := sc.Table("tasks")
	eff := wire.ScopeMap{{Key: "project_id", Values: []string{"project-1"}}}
	key := imageKey{partition: "p", epoch: "epoch", table: "tasks", digest: "d", schemaVersion: 1, asOf: 3}
	probe, err := st.ScanRows(ctx, "p", store.RowScanQuery{Table: "tasks", Scopes: eff, Limit: 1001, NoScopes: true})
	if err != nil {
		t.Fatal(err)
	}
	ref, err := e.buildImage(ctx, key, tbl, eff, probe)
	if err != nil {
		t.Fatal(err)
	}
	if ref.rowCount != total {
		t.Fatalf("rowCount %d, want %d", ref.rowCount, total)
	}
	seg, err := e.cfg.Segments.Segment(ctx, ref.id)
	if err != nil {
		t.Fatal(err)
	}
	rows, err := sqliteimage.ReadRows(ctx, seg.Bytes, tbl.WireColumns(), tbl.PrimaryKey())
	if err != nil {
		t.Fatal(err)
	}
	if len(rows) != total {
		t.Fatalf("image holds %d rows, want %d", len(rows), total)
	}
	for i, r := range rows {
		id, title := fmt.Sprintf("task-%08d", i), fmt.Sprintf("a task title number %d", i)
		if v := r.Values; v[0].Str != id || v[2].Str != title || v[3].Int != int64(i) || v[5].Bool != (i%2 == 0) || r.ServerVersion != 1 {
			t.Fatalf("row %d: %+v, want id %s, title %q, n %d", i, r, id, title, i)
		}
	}
}
