package bench

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/syncgo/syncgo/internal/sspclient"
)

// reconnectAttempts bounds the dials of one client after the drop.
const reconnectAttempts = 6

// runReconnect: Clients clients registered and connected; all sockets
// drop at once, a writer pushes Commits commits meanwhile, and all
// reconnect at once (no jitter: the worst case). Each recovers on
// hello.requiresSync or a wake-up with a pull round. Figures: the time
// until every client's cursor reached the last commit, and the spread.
func runReconnect(ctx context.Context, r *runner) error {
	n := r.cfg.Clients
	r.res.Params["clients"], r.res.Params["commits"] = n, r.cfg.Commits
	socks, err := r.openSockets(ctx, n, nil)
	defer func() { closeSockets(socks) }()
	if err != nil {
		return err
	}
	w, err := r.client(0, sspclient.Options{})
	if err != nil {
		return err
	}
	if _, err := w.Sync(ctx); err != nil {
		return fmt.Errorf("writer: %w", err)
	}
	each(socks, (*vsocket).drop)
	var last int64
	for k := range r.cfg.Commits {
		if err := r.upsertN(w, "r"+r.cfg.Scope, r.cfg.Scope, k, 1, 0, false); err != nil {
			return err
		}
		res, err := w.Push(ctx)
		if err != nil {
			return r.fail(fmt.Errorf("writer push: %w", err))
		}
		_, seq := r.checkPushed(res)
		last = max(last, seq)
	}
	sync0, rec0 := r.sockets.requiresSync.Load(), r.sockets.recoveries.Load()
	var converged atomic.Int64
	r.status(func(el time.Duration) string {
		return fmt.Sprintf("reconnect %s/%s converged  %.1f s", groupThousands(converged.Load()), groupThousands(int64(n)), el.Seconds())
	})
	wctx, cancel := r.waitCtx(ctx)
	defer cancel()
	times := make([]time.Duration, n)
	start := time.Now()
	each(socks, func(s *vsocket) {
		if err := s.reconnect(wctx); err != nil {
			times[s.i] = -1
			return
		}
		if !s.waitCursor(wctx, last) {
			r.errors.Add(1)
			times[s.i] = -1
			return
		}
		times[s.i] = time.Since(start)
		converged.Add(1)
	})
	var ok []time.Duration
	for _, t := range times {
		if t >= 0 {
			ok = append(ok, t)
		}
	}
	sum := summarize(ok)
	r.res.add("clients", float64(n), "")
	r.res.add("commits while away", float64(r.cfg.Commits), "")
	r.res.addMs("time until all converged", sum.Max)
	r.res.addMs("convergence p50", sum.P50)
	r.res.addMs("convergence p99", sum.P99)
	r.res.add("converged", float64(len(ok)), "")
	r.res.add("hellos with requiresSync", float64(r.sockets.requiresSync.Load()-sync0), "")
	r.res.add("recovery pulls", float64(r.sockets.recoveries.Load()-rec0), "")
	if r.pid > 0 {
		// What the server keeps once the storm is over: the clients
		// leave; "server RSS after" is read at once, with the storm's
		// garbage still resident (as every workload reads it), then
		// again after the settle time (the clients' idle HTTP
		// connections still open), and after six times it.
		closeSockets(socks)
		socks = nil
		if rss, err := readRSS(r.pid); err == nil {
			r.res.add("server RSS after", float64(rss), "KiB")
			r.rssDone = true
		}
		time.Sleep(r.cfg.settle)
		if rss, err := readRSS(r.pid); err == nil {
			r.res.add("server RSS settled after the clients left", float64(rss), "KiB")
		}
		// And later, the clients' idle HTTP connections closed too (a
		// server keeps a goroutine and buffers for each): whether the
		// server returned the storm's memory (a release that waits for
		// its spacing, the runtime's own scavenging).
		r.tr.CloseIdleConnections()
		time.Sleep(5 * r.cfg.settle)
		if rss, err := readRSS(r.pid); err == nil {
			r.res.add(fmt.Sprintf("server RSS %s after the clients left, HTTP connections closed", 6*r.cfg.settle), float64(rss), "KiB")
		}
	}
	return nil
}

// reconnect dials again, with exponential backoff from 50 ms after a
// failed dial; each failure counts as an error.
func (s *vsocket) reconnect(ctx context.Context) error {
	var err error
	for attempt := range reconnectAttempts {
		if err = s.connect(ctx); err == nil {
			return nil
		}
		s.r.errors.Add(1)
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond << attempt):
		}
	}
	return err
}

// waitCursor waits until the subscription's cursor reaches seq.
func (s *vsocket) waitCursor(ctx context.Context, seq int64) bool {
	t := time.NewTicker(5 * time.Millisecond)
	defer t.Stop()
	for s.cursor() < seq {
		select {
		case <-ctx.Done():
			return false
		case <-t.C:
		}
	}
	return true
}

// each runs fn on every socket at once and waits for all.
func each(socks []*vsocket, fn func(*vsocket)) {
	var wg sync.WaitGroup
	for _, s := range socks {
		if s == nil {
			continue
		}
		wg.Add(1)
		go func() { defer wg.Done(); fn(s) }()
	}
	wg.Wait()
}
