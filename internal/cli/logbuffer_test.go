package cli

import (
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"
)

// state is what was written and in how many writes.
func (s *syncBuffer) state() (string, int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String(), s.writes
}

// TestLineBuffer: access lines are held and written together once the
// delay passed; a direct line writes what is held first, then itself, so
// the order is kept; Flush writes what is held; a burst past the size
// bound is written without waiting.
func TestLineBuffer(t *testing.T) {
	t.Parallel()
	out := &syncBuffer{}
	b := newLineBuffer(out, time.Hour)
	for i := range 3 {
		fmt.Fprintf(b, "access %d\n", i)
	}
	if got, n := out.state(); got != "" || n != 0 {
		t.Fatalf("written before the delay: %q in %d writes", got, n)
	}
	fmt.Fprintf(b.direct(), "event\n")
	if got, n := out.state(); got != "access 0\naccess 1\naccess 2\nevent\n" || n != 2 {
		t.Fatalf("after a direct line: %q in %d writes; want the held lines first, in one write", got, n)
	}
	fmt.Fprintf(b, "access 3\n")
	if err := b.Flush(); err != nil {
		t.Fatal(err)
	}
	if got, _ := out.state(); !strings.HasSuffix(got, "event\naccess 3\n") {
		t.Fatalf("after Flush: %q", got)
	}
	line := strings.Repeat("x", 1023) + "\n"
	for range accessFlushBytes / len(line) {
		_, _ = b.Write([]byte(line))
	}
	if got, _ := out.state(); strings.Count(got, line) != accessFlushBytes/len(line) {
		t.Fatalf("a full buffer was not written at once: %d of %d lines", strings.Count(got, line), accessFlushBytes/len(line))
	}
}

// TestLineBufferDelay: held lines are written by the timer, and lines
// written concurrently all arrive, each whole.
func TestLineBufferDelay(t *testing.T) {
	t.Parallel()
	out := &syncBuffer{}
	b := newLineBuffer(out, 5*time.Millisecond)
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for i := range 100 {
				fmt.Fprintf(b, "g%d line %d\n", g, i)
			}
		})
	}
	wg.Wait()
	deadline := time.Now().Add(10 * time.Second)
	for {
		got, _ := out.state()
		if strings.Count(got, "\n") == 800 {
			for _, l := range strings.Split(strings.TrimSuffix(got, "\n"), "\n") {
				var g, i int
				if n, err := fmt.Sscanf(l, "g%d line %d", &g, &i); n != 2 || err != nil {
					t.Fatalf("torn line %q", l)
				}
			}
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d of 800 lines written after the delay", strings.Count(got, "\n"))
		}
		time.Sleep(5 * time.Millisecond)
	}
}
