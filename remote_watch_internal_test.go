package syncgo

import (
	"context"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"github.com/syncgo/syncgo/internal/remotewire"
)

// TestWatchDispatchSkipsSeenCommits: a commit notified late (the commit
// listener of a shared store brings it after the watch's last run read
// the log past it) does not rerun the watch; a newer commit of a table
// the query reads does, as a rerun of every watch (seq 0) does. Each run
// is held in flight (running), so a trigger shows as dirty instead of
// starting a run.
func TestWatchDispatchSkipsSeenCommits(t *testing.T) {
	w := &watchState{id: "tasks", cq: &compiledQuery{tables: []string{"tasks"}}, seen: 5, running: true}
	s := &watchSession{watches: map[string]*watchState{w.id: w}}
	h := &watchHub{parts: map[string]*watchPartition{"p": {sessions: map[*watchSession]struct{}{s: {}}}}}
	for _, c := range []struct {
		partition string
		tables    []string
		seq       int64
		rerun     bool
	}{
		{"p", []string{"tasks"}, 5, false},  // read by the last run already
		{"p", []string{"tasks"}, 3, false},  // older still
		{"p", []string{"labels"}, 6, false}, // a table the query does not read
		{"q", []string{"tasks"}, 6, false},  // another partition
		{"p", []string{"labels", "tasks"}, 6, true},
		{"p", nil, 5, false}, // every table, but read already
		{"p", nil, 0, true},  // every watch, whatever it read
	} {
		w.dirty = false
		h.dispatch(c.partition, c.tables, c.seq)
		if w.dirty != c.rerun {
			t.Errorf("dispatch(%q, %v, %d): rerun %v, want %v", c.partition, c.tables, c.seq, w.dirty, c.rerun)
		}
	}
}

// TestWatchRerunAfterRunInFlight: a trigger that arrives while a run is
// in flight reruns the watch after it only when the run did not read
// through the trigger's commit: a late notification of a commit the first
// run read (the flake of TestOperationsWatch on Postgres: a second tasks
// snapshot after a labels commit) reruns nothing; a newer commit, a
// trigger for every change, or a run that failed still rerun.
func TestWatchRerunAfterRunInFlight(t *testing.T) {
	for _, c := range []struct {
		name  string
		seqs  []int64 // triggers during the run
		seen  int64   // the run's maxCommitSeq
		read  bool
		rerun bool
	}{
		{"late notice of a commit the run read", []int64{1}, 2, true, false},
		{"notices through the run's read", []int64{1, 2}, 2, true, false},
		{"a commit after the run's read", []int64{1, 3}, 2, true, true},
		{"every change", []int64{0}, 2, true, true},
		{"every change and a read commit", []int64{1, 0}, 2, true, true},
		{"the run failed", []int64{1}, 0, false, true},
		{"no trigger", nil, 2, true, false},
	} {
		w := &watchState{id: "tasks", cq: &compiledQuery{tables: []string{"tasks"}}, running: true}
		s := &watchSession{watches: map[string]*watchState{w.id: w}}
		for _, seq := range c.seqs {
			s.triggerLocked(w, seq)
		}
		w.seen = c.seen
		if got := w.settle(c.read); got != c.rerun {
			t.Errorf("%s: rerun %v, want %v", c.name, got, c.rerun)
		}
	}
}

// TestWatchUnwatchSuppressesResultInFlight: an unwatch that arrives
// while a run is about to write its result (the run found the watch
// still registered) waits for that write; nothing is written for the
// watch once the unwatch has been handled (REMOTE.md §6). The hook runs
// in that window and hands the unwatch to another goroutine; without the
// write lock the unwatch returns at once and the result follows it.
func TestWatchUnwatchSuppressesResultInFlight(t *testing.T) {
	conn := &recordingConn{}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	srv := &Server{}
	cq := &compiledQuery{q: Query{Authorize: func(context.Context, Caller, Params) (bool, error) { return false, nil }}}
	s := &watchSession{conn: conn, ctx: ctx, cancel: cancel, watches: map[string]*watchState{},
		hub: &watchHub{s: srv}}
	w := &watchState{id: "tasks", cq: cq}
	s.watches[w.id] = w
	unwatch, err := remotewire.Encode(nil, remotewire.Object{{Key: "revision", Value: 1}, {Key: "kind", Value: "unwatch"}, {Key: "watchId", Value: "tasks"}})
	if err != nil {
		t.Fatal(err)
	}
	unwatched := make(chan struct{})
	s.beforeWrite = func() {
		go func() {
			s.receive(unwatch)
			conn.unwatched.Store(true)
			close(unwatched)
		}()
		select {
		case <-unwatched:
		case <-time.After(100 * time.Millisecond):
		}
	}
	s.mu.Lock()
	s.triggerLocked(w, 0)
	s.mu.Unlock()
	select {
	case <-unwatched:
	case <-time.After(10 * time.Second):
		t.Fatal("the unwatch never returned")
	}
	if conn.writes.Load() == 0 {
		t.Fatal("the result found the watch registered and was not written")
	}
	if conn.late.Load() {
		t.Fatal("a result was written after the unwatch was handled")
	}
	// The run ends: the watch is gone, so no rerun is pending.
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(time.Millisecond) {
		s.mu.Lock()
		running, registered := w.running, s.watches[w.id] != nil
		s.mu.Unlock()
		if registered {
			t.Fatal("the watch is still registered after the unwatch")
		}
		if !running {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the run did not end after the unwatch")
		}
	}
}

// recordingConn counts the writes to it and whether one came
// after unwatched was set.
type recordingConn struct {
	net.Conn
	unwatched atomic.Bool
	late      atomic.Bool
	writes    atomic.Int64
}

func (c *recordingConn) Write(b []byte) (int, error) {
	if c.unwatched.Load() {
		c.late.Store(true)
	}
	c.writes.Add(1)
	return len(b), nil
}

func (c *recordingConn) SetWriteDeadline(time.Time) error { return nil }
func (c *recordingConn) Close() error                     { return nil }
