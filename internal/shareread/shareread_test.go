package shareread

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
)

// TestBatched: one ask is answered alone; several by one batched read,
// each its own answer in order, or the batched read's error for all.
func TestBatched(t *testing.T) {
	got := map[int]string{}
	reply := func(i int, r string, err error) {
		if err != nil {
			r = "error " + err.Error()
		}
		got[i] = r
	}
	alone := func(q string) (string, error) { return "alone " + q, nil }
	all := func(qs []string) ([]string, error) {
		out := make([]string, len(qs))
		for i, q := range qs {
			out[i] = "all " + q
		}
		return out, nil
	}
	if n := Batched([]string{"x"}, reply, alone, all); n != 0 || got[0] != "alone x" {
		t.Errorf("one ask: %d shared, %q", n, got[0])
	}
	if n := Batched([]string{"x", "y"}, reply, alone, all); n != 2 || got[0] != "all x" || got[1] != "all y" {
		t.Errorf("two asks: %d shared, %v", n, got)
	}
	fail := func([]string) ([]string, error) { return nil, errors.New("down") }
	if Batched([]string{"x", "y"}, reply, alone, fail); got[0] != "error down" || got[1] != "error down" {
		t.Errorf("a failed read: %v", got)
	}
}

type ctxKey struct{}

func detached(ctx context.Context) (context.Context, context.CancelFunc) {
	return DetachedContext(ctx, make(chan struct{}))
}

// TestAskAlone: an ask that finds no read in flight reads alone on its
// own context (its cancellation ends the read); the asks that queue while
// it reads are answered together by one later read on a context with
// the first asker's values that outlives its cancellation; the key's queue is gone after each.
func TestAskAlone(t *testing.T) {
	var sr Reads[string, string]
	var mu sync.Mutex
	var reads [][]string
	started, release := make(chan struct{}), make(chan struct{})
	answer := func(ctx context.Context, qs []string, reply func(int, string, error)) {
		mu.Lock()
		reads = append(reads, slices.Clone(qs))
		first := len(reads) == 1
		mu.Unlock()
		if first {
			close(started)
			<-release
		}
		for i, q := range qs {
			if err := ctx.Err(); err != nil {
				reply(i, "", err)
				continue
			}
			v, _ := ctx.Value(ctxKey{}).(string)
			reply(i, q+" on "+v, nil)
		}
	}
	ctx, cancel := context.WithCancel(context.WithValue(context.Background(), ctxKey{}, "first"))
	type result struct {
		r   string
		err error
	}
	firstDone := make(chan result, 1)
	go func() {
		r, err := sr.Ask(ctx, detached, "k", "a", answer)
		firstDone <- result{r, err}
	}()
	<-started
	later := make(chan result, 2)
	for _, q := range []string{"b", "c"} {
		go func() {
			r, err := sr.Ask(context.WithValue(context.Background(), ctxKey{}, "later"), detached, "k", q, answer)
			later <- result{r, err}
		}()
	}
	for { // both queued behind the first read
		sr.mu.Lock()
		n := len(sr.m["k"].asks)
		sr.mu.Unlock()
		if n == 2 {
			break
		}
	}
	cancel()
	close(release)
	if res := <-firstDone; !errors.Is(res.err, context.Canceled) {
		t.Errorf("first ask, its context canceled during its read: %q, %v", res.r, res.err)
	}
	got := []string{}
	for range 2 {
		res := <-later
		if res.err != nil {
			t.Fatalf("queued ask: %v", res.err)
		}
		got = append(got, res.r)
	}
	slices.Sort(got)
	// The reader's context has the first asker's values, not its
	// cancellation.
	if want := []string{"b on first", "c on first"}; !slices.Equal(got, want) {
		t.Errorf("queued asks: %v, want %v", got, want)
	}
	mu.Lock()
	if len(reads) != 2 || !slices.Equal(reads[0], []string{"a"}) || len(reads[1]) != 2 {
		t.Errorf("reads %v, want [a] then both queued asks in one", reads)
	}
	mu.Unlock()
	for sr.Pending() != 0 { // the reader removes the queue after answering
	}
	if r, err := sr.Ask(context.WithValue(context.Background(), ctxKey{}, "again"), detached, "k", "d", answer); err != nil || r != "d on again" {
		t.Errorf("ask after: %q, %v", r, err)
	}
}

// TestAskAlonePanics: a lone read that panics leaves no queue behind, so
// the next ask of its key is answered.
func TestAskAlonePanics(t *testing.T) {
	var sr Reads[string, string]
	func() {
		defer func() { _ = recover() }()
		_, _ = sr.Ask(context.Background(), detached, "k", "a", func(context.Context, []string, func(int, string, error)) { panic("read") })
	}()
	if n := sr.Pending(); n != 0 {
		t.Fatalf("%d queues left after a panicking read", n)
	}
	r, err := sr.Ask(context.Background(), detached, "k", "b", func(_ context.Context, qs []string, reply func(int, string, error)) { reply(0, qs[0], nil) })
	if err != nil || r != "b" {
		t.Errorf("ask after the panic: %q, %v", r, err)
	}
}
