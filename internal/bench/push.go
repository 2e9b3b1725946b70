package bench

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/syncgo/syncgo/internal/sspclient"
)

// runPush: Clients virtual clients, each in a loop for Duration: queue a
// commit of one upsert (a fresh row in the client's own scope value) and
// send it as a push-only request, or with Round as a push+pull round of
// the client's subscription to its scope value (which returns its own
// commit). Figures: commits/s and the request latency.
func runPush(ctx context.Context, r *runner) error {
	n := r.cfg.Clients
	r.res.Params["clients"], r.res.Params["duration"], r.res.Params["round"] = n, r.cfg.Duration.String(), r.cfg.Round
	clients := make([]*sspclient.Client, n)
	err := parallel(ctx, n, 32, func(ctx context.Context, i int) error {
		c, err := r.client(i, sspclient.Options{})
		if err != nil {
			return err
		}
		if r.cfg.Round {
			if err := r.subscribe(c, clientScope(r.cfg.Scope, i)); err != nil {
				return err
			}
		}
		// Acquire the log epoch (and bootstrap the empty scope).
		if _, err := c.SyncUntilQuiet(ctx, 10); err != nil {
			return fmt.Errorf("client %d setup: %w", i, err)
		}
		clients[i] = c
		return nil
	})
	if err != nil {
		return err
	}
	rec := &recorder{}
	what := "push"
	if r.cfg.Round {
		what = "round"
	}
	line := &rateLine{what: what, unit: "commits"}
	r.status(func(el time.Duration) string {
		_, p99 := rec.takeWindow()
		return line.render(el, rec.count(), p99)
	})
	var stop atomic.Bool
	timer := time.AfterFunc(r.cfg.Duration, func() { stop.Store(true) })
	defer timer.Stop()
	var committed atomic.Int64
	var wg sync.WaitGroup
	start := time.Now()
	for i, c := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			prefix := fmt.Sprintf("p%s-%d", r.cfg.Scope, i)
			for k := 0; !stop.Load() && ctx.Err() == nil; k++ {
				if err := r.upsertN(c, prefix, clientScope(r.cfg.Scope, i), k, 1, 0, false); err != nil {
					r.fail(err)
					return
				}
				t0 := time.Now()
				var res *sspclient.RoundResult
				var err error
				if r.cfg.Round {
					res, err = c.Round(ctx)
				} else {
					res, err = c.Push(ctx)
				}
				if err != nil {
					r.fail(err)
					continue
				}
				applied, _ := r.checkPushed(res)
				committed.Add(int64(applied))
				rec.add(time.Since(t0))
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	if err := ctx.Err(); err != nil {
		return err
	}
	total := committed.Load()
	r.res.add("commits", float64(total), "")
	if r.cfg.Round {
		r.res.add("rounds/s", float64(rec.count())/elapsed.Seconds(), "1/s")
	}
	r.res.add("commits/s", float64(total)/elapsed.Seconds(), "1/s")
	r.res.addLatency("latency", rec.summary())
	return nil
}

// parallel runs fn for 0..n-1 with at most limit running at once, and
// returns the first error.
func parallel(ctx context.Context, n, limit int, fn func(ctx context.Context, i int) error) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	sem := make(chan struct{}, limit)
	var (
		wg    sync.WaitGroup
		once  sync.Once
		first error
	)
	for i := range n {
		select {
		case sem <- struct{}{}:
		case <-ctx.Done():
		}
		if ctx.Err() != nil {
			break
		}
		wg.Add(1)
		go func() {
			defer func() { <-sem; wg.Done() }()
			if err := fn(ctx, i); err != nil {
				once.Do(func() { first = err; cancel() })
			}
		}()
	}
	wg.Wait()
	if first == nil {
		first = ctx.Err()
	}
	return first
}

// clientScope is virtual client i's own scope value.
func clientScope(scope string, i int) string { return scope + "-" + strconv.Itoa(i) }
