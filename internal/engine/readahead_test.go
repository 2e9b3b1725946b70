package engine

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/syncgo/syncgo/store"
	"github.com/syncgo/syncgo/wire"
)

// windowStore answers ReadCommitWindow with one commit after the cursor,
// Complete as set; with block set, a read waits until its context ends.
// Its other methods are not used.
type windowStore struct {
	store.Store
	complete bool
	block    bool
	payload  int // bytes of the commit's one change
	// last, when set, is the log's last commit: its window is complete.
	last  int64
	reads atomic.Int64
	// afters counts the reads by cursor.
	mu     sync.Mutex
	afters map[int64]int
}

func (s *windowStore) ReadCommitWindow(ctx context.Context, _ string, q store.CommitWindowQuery) (store.CommitWindow, error) {
	s.reads.Add(1)
	s.mu.Lock()
	if s.afters == nil {
		s.afters = map[int64]int{}
	}
	s.afters[q.AfterSeq]++
	s.mu.Unlock()
	if s.block {
		<-ctx.Done()
		return store.CommitWindow{}, ctx.Err()
	}
	c := store.Commit{Seq: q.AfterSeq + 1, Changes: []store.Change{{RowID: "r", Payload: make([]byte, s.payload)}}}
	win := store.CommitWindow{Commits: []store.Commit{c}, Complete: s.complete || (s.last > 0 && c.Seq >= s.last)}
	if q.StateAfter {
		win.State = &store.RequestState{Gate: store.ServeGate{StoredSchemaVersion: q.Running}}
	}
	return win, nil
}

func aheadQuery(after, through int64, values ...string) store.CommitWindowQuery {
	return store.CommitWindowQuery{Table: "tasks", Scopes: wire.ScopeMap{{Key: "project_id", Values: values}},
		AfterSeq: after, ThroughSeq: through, LimitChanges: 1000}
}

// A window read ahead is taken only by the query it was read for, under
// the epoch it was read under, and once.
func TestReadAheadTakesOnlyItsWindow(t *testing.T) {
	ctx := context.Background()
	k := aheadKey{partition: "p", actor: "a", client: "c"}
	base := aheadQuery(10, 100, "p1")
	tests := []struct {
		name     string
		complete bool
		key      aheadKey
		q        store.CommitWindowQuery
		epoch    string
		ok       bool
	}{
		{"the same query", false, k, base, "e1", true},
		{"a later bound, the window cut short by the limit", false, k, aheadQuery(10, 120, "p1"), "e1", true},
		{"a later bound, the window complete", true, k, aheadQuery(10, 120, "p1"), "e1", false},
		{"an earlier bound", false, k, aheadQuery(10, 90, "p1"), "e1", false},
		{"another cursor", false, k, aheadQuery(11, 100, "p1"), "e1", false},
		{"other scopes", false, k, aheadQuery(10, 100, "p1", "p2"), "e1", false},
		{"another scope value", false, k, aheadQuery(10, 100, "p2"), "e1", false},
		{"another limit", false, k, func() store.CommitWindowQuery { q := base; q.LimitChanges = 5; return q }(), "e1", false},
		{"another table", false, k, func() store.CommitWindowQuery { q := base; q.Table = "notes"; return q }(), "e1", false},
		{"another epoch", false, k, base, "e2", false},
		{"another client", false, aheadKey{partition: "p", actor: "a", client: "c2"}, base, "e1", false},
		{"another actor", false, aheadKey{partition: "p", actor: "b", client: "c"}, base, "e1", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ra := newReadAhead()
			defer ra.stop()
			s := &windowStore{complete: tt.complete}
			before := time.Now()
			ra.start(s, k, base, "e1", nil)
			win, _, doneAt, ok := ra.take(ctx, tt.key, tt.q, tt.epoch)
			if ok != tt.ok {
				t.Fatalf("take = %v, want %v", ok, tt.ok)
			}
			if ok && (len(win.Commits) != 1 || win.Commits[0].Seq != 11 || doneAt.Before(before)) {
				t.Fatalf("took %+v done at %v (started after %v); want the window after 10, read after the start", win, doneAt, before)
			}
			// A window taken was read, and the window after it too when the
			// limit cut it short (and, the taken one out of the chain, the
			// one after that); a window not taken may be followed or not yet
			// when it is dropped.
			read, used := ra.read.Load(), ra.used.Load()
			least := int64(1)
			if tt.ok && !tt.complete {
				least = 2
			}
			if (used == 1) != tt.ok || read < least || read > 1+maxChain || (tt.complete && read != 1) {
				t.Fatalf("counters read %d used %d; want %d to %d reads and used %v", read, used, least, 1+maxChain, tt.ok)
			}
			_, _, _, again := ra.take(ctx, k, base, "e1")
			if tt.key == k && again {
				t.Fatal("a window was taken twice, or kept after a request of its client that did not match it")
			}
			if tt.key != k && !again {
				t.Fatal("another client's request dropped the window")
			}
		})
	}
}

// A catch-up's requests, each taking its window and starting the next as
// the engine does: every window after the first is read ahead, each
// once, the one after the window taken already read when it is taken; a
// key holds at most maxChain windows; the last window (complete) starts
// no read after it.
func TestReadAheadFollows(t *testing.T) {
	ctx := context.Background()
	k := aheadKey{partition: "p", actor: "a", client: "c"}
	s := &windowStore{last: 6}
	ra := newReadAhead()
	defer ra.stop()
	ra.start(s, k, aheadQuery(0, 100, "p1"), "e1", nil)
	for after := int64(0); after < 6; after++ {
		// With every read ended first, the window after the one taken
		// was read before the take and is followed when the take makes
		// it the chain's last.
		settle(t, ra)
		win, _, _, ok := ra.take(ctx, k, aheadQuery(after, 100, "p1"), "e1")
		if !ok || win.Commits[0].Seq != after+1 {
			t.Fatalf("window after %d: taken %v, %+v", after, ok, win.Commits)
		}
		// The chain holds the next window, and may hold the one after it.
		ra.mu.Lock()
		chain := ra.entries[k]
		followed := len(chain) >= 1 && len(chain) <= maxChain && chain[0].q.AfterSeq == after+1
		ra.mu.Unlock()
		if last := after+1 == 6; followed == last || (last && len(chain) > 0) {
			t.Fatalf("after taking the window after %d (the last: %v), the chain holds %d windows", after, last, len(chain))
		}
		if !win.Complete {
			ra.start(s, k, aheadQuery(after+1, 100, "p1"), "e1", nil)
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for after := range int64(6) {
		if n := s.afters[after]; n != 1 {
			t.Errorf("the window after %d was read %d times, want once", after, n)
		}
	}
	if len(s.afters) != 6 {
		t.Errorf("reads by cursor %v, want one each for 0..5", s.afters)
	}

	// Held and never taken, a chain stops at maxChain windows.
	k2 := aheadKey{partition: "p", actor: "a", client: "d"}
	s2 := &windowStore{}
	ra.start(s2, k2, aheadQuery(0, 100, "p1"), "e1", nil)
	deadline := time.Now().Add(5 * time.Second)
	for s2.reads.Load() < maxChain && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	time.Sleep(20 * time.Millisecond)
	ra.mu.Lock()
	held := len(ra.entries[k2])
	ra.mu.Unlock()
	if got := s2.reads.Load(); got != maxChain || held != maxChain {
		t.Fatalf("an untaken chain read %d windows and holds %d, want %d", got, held, maxChain)
	}
}

// settle waits until no read is in flight.
func settle(t *testing.T, ra *readAhead) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		ra.mu.Lock()
		reading := ra.reading
		ra.mu.Unlock()
		if reading == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d reads still in flight", reading)
		}
		time.Sleep(time.Millisecond)
	}
}

// At most maxReadingAhead reads are in flight; stop cancels them, waits
// for them, and no read starts after it.
func TestReadAheadBounded(t *testing.T) {
	ra := newReadAhead()
	s := &windowStore{block: true}
	for i := range 5 {
		ra.start(s, aheadKey{partition: "p", actor: "a", client: string(rune('a' + i))}, aheadQuery(0, 100, "p1"), "e1", nil)
	}
	if n := ra.read.Load(); n != maxReadingAhead {
		t.Fatalf("%d reads started for 5 clients, want %d", n, maxReadingAhead)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	if _, _, _, ok := ra.take(ctx, aheadKey{partition: "p", actor: "a", client: "a"}, aheadQuery(0, 100, "p1"), "e1"); ok {
		t.Fatal("a read that never ended was taken")
	}
	done := make(chan struct{})
	go func() { ra.stop(); close(done) }()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("stop did not end the reads in flight")
	}
	if got := s.reads.Load(); got != maxReadingAhead {
		t.Fatalf("the store saw %d reads, want %d", got, maxReadingAhead)
	}
	ra.start(s, aheadKey{partition: "p", actor: "a", client: "z"}, aheadQuery(0, 100, "p1"), "e1", nil)
	if n := ra.read.Load(); n != maxReadingAhead {
		t.Fatal("a read started after stop")
	}
}

// A window whose rows exceed readAheadMaxBytes is not kept: its request
// reads it itself.
func TestReadAheadDropsLargeWindows(t *testing.T) {
	ctx := context.Background()
	k := aheadKey{partition: "p", actor: "a", client: "c"}
	for _, size := range []int{readAheadMaxBytes, readAheadMaxBytes + 1} {
		ra := newReadAhead()
		ra.start(&windowStore{payload: size}, k, aheadQuery(0, 100, "p1"), "e1", nil)
		_, _, _, ok := ra.take(ctx, k, aheadQuery(0, 100, "p1"), "e1")
		ra.stop()
		if want := size <= readAheadMaxBytes; ok != want {
			t.Errorf("window of %d payload bytes taken = %v, want %v", size, ok, want)
		}
	}
}

// A window read ahead with the state after its rows (StateAfter) hands
// that state to a request that asks for it at the same running version,
// and to no other.
func TestReadAheadStateAfter(t *testing.T) {
	ctx := context.Background()
	k := aheadKey{partition: "p", actor: "a", client: "c"}
	with := func(stateAfter bool, running int32) store.CommitWindowQuery {
		q := aheadQuery(10, 100, "p1")
		q.StateAfter, q.Running = stateAfter, running
		return q
	}
	tests := []struct {
		name      string
		read, req store.CommitWindowQuery
		state     bool
	}{
		{"both ask, the same version", with(true, 3), with(true, 3), true},
		{"another running version", with(true, 3), with(true, 4), false},
		{"the request does not ask", with(true, 3), with(false, 0), false},
		{"the read did not ask", with(false, 0), with(true, 3), false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ra := newReadAhead()
			defer ra.stop()
			ra.start(&windowStore{}, k, tt.read, "e1", nil)
			win, _, _, ok := ra.take(ctx, k, tt.req, "e1")
			if !ok {
				t.Fatal("the window was not taken")
			}
			if got := win.State != nil; got != tt.state {
				t.Fatalf("state handed over = %v, want %v", got, tt.state)
			}
			if tt.state && win.State.Gate.StoredSchemaVersion != 3 {
				t.Fatalf("state %+v, want the read's", win.State)
			}
		})
	}
}

// Clients that take, skip and repeat windows in any order, with reads
// that end early or late: once every key's window is taken or dropped,
// the read-ahead holds none and reads none (its bounds never leak).
func TestReadAheadAccounting(t *testing.T) {
	ctx := context.Background()
	s := &windowStore{}
	ra := newReadAhead()
	var wg sync.WaitGroup
	for c := range 6 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			k := aheadKey{partition: "p", actor: "a", client: string(rune('a' + c))}
			after := int64(0)
			for i := range 300 {
				switch (i * (c + 7)) % 5 {
				case 0: // the next window, as a catch-up asks for it
					if _, _, _, ok := ra.take(ctx, k, aheadQuery(after, 100, "p1"), "e1"); ok {
						after++
					}
				case 1: // another cursor
					ra.take(ctx, k, aheadQuery(after+3, 100, "p1"), "e1")
				case 2:
					time.Sleep(time.Duration(i%3) * time.Millisecond)
				}
				ra.start(s, k, aheadQuery(after, 100, "p1"), "e1", nil)
			}
			ra.take(ctx, k, aheadQuery(-1, 100, "p1"), "e1")
		}()
	}
	wg.Wait()
	deadline := time.Now().Add(5 * time.Second)
	for {
		ra.mu.Lock()
		reading, n, held := ra.reading, len(ra.entries), ra.held
		ra.mu.Unlock()
		if reading == 0 && n == 0 && held == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after every window was taken or dropped: %d reading, %d keys, %d windows held", reading, n, held)
		}
		time.Sleep(time.Millisecond)
	}
	ra.stop()
}
