package bench

import (
	"fmt"
	"io"
	"os"
	"slices"
	"sync"
	"time"
)

// Summary summarizes a latency sample.
type Summary struct {
	N                  int
	P50, P90, P99, Max time.Duration
	Mean               time.Duration
}

// summarize sorts d in place and summarizes it.
func summarize(d []time.Duration) Summary {
	if len(d) == 0 {
		return Summary{}
	}
	slices.Sort(d)
	var sum time.Duration
	for _, x := range d {
		sum += x
	}
	return Summary{N: len(d), P50: quantile(d, 0.50), P90: quantile(d, 0.90), P99: quantile(d, 0.99),
		Max: d[len(d)-1], Mean: sum / time.Duration(len(d))}
}

// quantile is the nearest-rank quantile of a sorted sample.
func quantile(sorted []time.Duration, q float64) time.Duration {
	i := int(q*float64(len(sorted))+0.5) - 1
	return sorted[min(max(i, 0), len(sorted)-1)]
}

// recorder collects latencies from many goroutines, and a window of the
// latest ones for the live status.
type recorder struct {
	mu     sync.Mutex
	all    []time.Duration
	window []time.Duration
}

func (r *recorder) add(d time.Duration) {
	r.mu.Lock()
	r.all = append(r.all, d)
	r.window = append(r.window, d)
	r.mu.Unlock()
}

func (r *recorder) count() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.all)
}

// takeWindow returns the count and p99 of the latencies recorded since
// the last call.
func (r *recorder) takeWindow() (int, time.Duration) {
	r.mu.Lock()
	w := r.window
	r.window = make([]time.Duration, 0, len(w))
	r.mu.Unlock()
	if len(w) == 0 {
		return 0, 0
	}
	return len(w), summarize(w).P99
}

func (r *recorder) summary() Summary {
	r.mu.Lock()
	defer r.mu.Unlock()
	return summarize(slices.Clone(r.all))
}

// status prints a live one-line status about 4 times a second: in place
// on a terminal, a line every 2 seconds otherwise.
type status struct {
	w    io.Writer
	tty  bool
	stop chan struct{}
	done chan struct{}
}

func startStatus(w io.Writer, line func(elapsed time.Duration) string) *status {
	s := &status{w: w, stop: make(chan struct{}), done: make(chan struct{})}
	if f, ok := w.(*os.File); ok {
		if fi, err := f.Stat(); err == nil && fi.Mode()&os.ModeCharDevice != 0 {
			s.tty = true
		}
	}
	every := 2 * time.Second
	if s.tty {
		every = 250 * time.Millisecond
	}
	start := time.Now()
	go func() {
		defer close(s.done)
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			select {
			case <-s.stop:
				if s.tty {
					fmt.Fprint(s.w, "\r\x1b[K")
				}
				return
			case <-t.C:
				l := line(time.Since(start))
				if s.tty {
					fmt.Fprintf(s.w, "\r%s\x1b[K", l)
				} else {
					fmt.Fprintln(s.w, l)
				}
			}
		}
	}()
	return s
}

func (s *status) close() {
	if s == nil {
		return
	}
	close(s.stop)
	<-s.done
}

// rateLine renders "<what> <n> <unit>  <rate>/s  p99 <p99>" from a
// counter sampled at each tick.
type rateLine struct {
	what, unit string
	last       int
	lastAt     time.Duration
}

func (l *rateLine) render(elapsed time.Duration, n int, p99 time.Duration) string {
	rate := 0.0
	if dt := (elapsed - l.lastAt).Seconds(); dt > 0 {
		rate = float64(n-l.last) / dt
	}
	l.last, l.lastAt = n, elapsed
	s := fmt.Sprintf("%s %s %s  %s/s", l.what, groupThousands(int64(n)), l.unit, groupThousands(int64(rate)))
	if p99 > 0 {
		s += fmt.Sprintf("  p99 %.1f ms", float64(p99.Microseconds())/1000)
	}
	return s
}
