package storetest

import (
	"errors"
	"testing"

	"github.com/syncgo/syncgo/store"
)

// RunPartitions tests the partition registry and counters.
func RunPartitions(t *testing.T, open Opener) {
	runCases(t, open, []testCase{
		{"Unknown", testPartitionUnknown},
		{"TouchCreates", testTouchCreates},
		{"TouchRefreshesLastSeen", testTouchRefreshesLastSeen},
		{"Counters", testPartitionCounters},
		{"Isolated", testPartitionsIsolated},
	})
}

func wantPartition(t *testing.T, what string, got, want store.Partition) {
	t.Helper()
	if got != want {
		t.Errorf("%s = %+v, want %+v", what, got, want)
	}
}

func testPartitionUnknown(t *testing.T, open Opener) {
	e := newEnv(t, open)
	if p, err := e.s.Partition(e.ctx, "nope"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("Partition(unknown) = %+v, %v; want ErrNotFound", p, err)
	}
}

func testTouchCreates(t *testing.T, open Opener) {
	e := newEnv(t, open)
	got, err := e.s.TouchPartition(e.ctx, "p1", 1234, "e1")
	if err != nil {
		t.Fatalf("TouchPartition: %v", err)
	}
	want := store.Partition{ID: "p1", LogEpoch: "e1", LastAuthenticatedAtMs: 1234}
	wantPartition(t, "TouchPartition(new)", got, want)
	wantPartition(t, "Partition after TouchPartition", e.partition("p1"), want)
}

func testTouchRefreshesLastSeen(t *testing.T, open Opener) {
	e := newEnv(t, open)
	if _, err := e.s.TouchPartition(e.ctx, "p1", 1000, "e1"); err != nil {
		t.Fatalf("TouchPartition: %v", err)
	}
	got, err := e.s.TouchPartition(e.ctx, "p1", 5000, "e1")
	if err != nil {
		t.Fatalf("second TouchPartition: %v", err)
	}
	want := store.Partition{ID: "p1", LogEpoch: "e1", LastAuthenticatedAtMs: 5000}
	wantPartition(t, "second TouchPartition", got, want)
	wantPartition(t, "Partition after second TouchPartition", e.partition("p1"), want)
}

func testPartitionCounters(t *testing.T, open Opener) {
	e := newEnv(t, open)
	e.touch("p1")
	for i := range 3 {
		e.upsert("p1", Task{ID: "t1", ProjectID: "p1"}.RowWrite(t, int64(i+1)))
	}
	want := store.Partition{ID: "p1", LogEpoch: epochOf("p1"), LastAuthenticatedAtMs: 1000, MaxCommitSeq: 3}
	wantPartition(t, "Partition after 3 commits", e.partition("p1"), want)
	got, err := e.s.TouchPartition(e.ctx, "p1", 2000, "other")
	if err != nil {
		t.Fatalf("TouchPartition: %v", err)
	}
	want.LastAuthenticatedAtMs = 2000
	wantPartition(t, "TouchPartition after 3 commits", got, want)
}

func testPartitionsIsolated(t *testing.T, open Opener) {
	e := newEnv(t, open)
	e.touch("p1")
	e.upsert("p1", Task{ID: "t1", ProjectID: "x"}.RowWrite(t, 1))
	if p, err := e.s.Partition(e.ctx, "p2"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("Partition(p2) after touching p1 = %+v, %v; want ErrNotFound", p, err)
	}
	got := e.touch("p2")
	want := store.Partition{ID: "p2", LogEpoch: epochOf("p2"), LastAuthenticatedAtMs: 1000}
	wantPartition(t, "TouchPartition(p2)", got, want)
	e.wantNoRow("p2", TableTasks, "t1")
}
