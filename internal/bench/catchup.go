package bench

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/syncgo/syncgo/internal/sspclient"
	"github.com/syncgo/syncgo/wire"
)

// seedBatch is the most operations the seeder sends per request.
const seedBatch = 500

// runCatchup: a client registers a subscription to the run's fresh scope
// (a bootstrap of the empty scope, which also holds the retention horizon
// back), Commits one-upsert commits are seeded into the scope, then the
// client catches up from its cursor with limitCommits 1000 until it has
// them all. With Seeded it pulls from cursor 0. Figures: the catch-up
// time and commits/s.
func runCatchup(ctx context.Context, r *runner) error {
	r.res.Params["commits"], r.res.Params["seeded"] = r.cfg.Commits, r.cfg.Seeded
	if r.cfg.RoundDelay > 0 {
		r.res.Params["roundDelay"] = r.cfg.RoundDelay.String()
	}
	p := r.newPuller(0, wire.PullHeader{LimitCommits: 1000, Accept: wire.AcceptInlineRows | wire.AcceptExternalRows}, -1)
	if r.cfg.Seeded {
		// The data is there: acquire the log epoch with a pull of no
		// subscription (a bootstrap of the seeded scope would take many
		// rounds, and an unfinished one would make the catch-up resume
		// the bootstrap instead of reading commits), then read the log
		// from its start.
		if err := p.acquireEpoch(ctx); err != nil {
			return r.fail(fmt.Errorf("registration: %w", err))
		}
		p.sub.Cursor, p.sub.BootstrapState = 0, nil
	} else {
		// Register the subscription with a bootstrap of the fresh, empty
		// scope (it also holds the retention horizon back).
		for range 10 {
			st, err := p.round(ctx)
			if err != nil {
				return r.fail(fmt.Errorf("registration: %w", err))
			}
			if !st.epoch && !st.pending {
				break
			}
		}
	}
	var last int64
	if !r.cfg.Seeded {
		var err error
		if last, err = r.seedRows(ctx, r.cfg.Commits, r.cfg.CatchUpRows, false); err != nil {
			return err
		}
	}
	r.res.Params["fromCursor"] = p.sub.Cursor
	if r.cfg.CatchUpRows > 0 {
		r.res.Params["catchupRows"] = r.cfg.CatchUpRows
	}
	p.allowReset = true
	var got atomic.Int64
	line := &rateLine{what: "catchup", unit: "commits"}
	r.status(func(el time.Duration) string { return line.render(el, int(got.Load()), 0) })
	bytes0 := r.bytesIn.Load()
	rounds, resets, rows := 0, 0, 0
	start := time.Now()
	for {
		st, err := p.round(ctx)
		if err != nil {
			return r.fail(err)
		}
		rounds++
		got.Add(int64(st.commits))
		rows += st.rows
		if st.reset {
			// The server answers with a fresh bootstrap (§8.4): follow it.
			if resets++; resets > 3 {
				return r.fail(fmt.Errorf("catch-up: reset %d times", resets))
			}
			continue
		}
		if st.epoch || st.pending {
			continue
		}
		if (st.commits == 0 && st.rows == 0) || (last > 0 && p.sub.Cursor >= last) {
			break
		}
		if r.cfg.RoundDelay > 0 {
			time.Sleep(r.cfg.RoundDelay)
		}
	}
	elapsed := time.Since(start)
	n := got.Load()
	switch want := min(r.cfg.CatchUpRows, r.cfg.Commits); {
	case r.cfg.Seeded:
	case resets > 0 && r.cfg.CatchUpRows > 0 && rows < want:
		r.errors.Add(int64(want - rows)) // the bootstrap must hold every row
	case resets == 0 && n < int64(r.cfg.Commits):
		r.errors.Add(int64(r.cfg.Commits) - n)
	}
	r.res.add("commits caught up", float64(n), "")
	r.res.add("resets (bootstrapped again)", float64(resets), "")
	r.res.add("rows bootstrapped", float64(rows), "")
	r.res.addMs("catch-up time", elapsed)
	r.res.add("commits/s", float64(n)/elapsed.Seconds(), "1/s")
	r.res.add("rounds", float64(rounds), "")
	r.res.add("bytes received", float64(r.bytesIn.Load()-bytes0), "B")
	return nil
}

// seed pushes n upserts of fresh rows into the run's scope as client 0:
// n one-upsert commits, 500 per request, or with batched, commits of 500
// upserts each. It reports the seeding rate and returns the last
// commitSeq.
func (r *runner) seed(ctx context.Context, n int, batched bool) (int64, error) {
	return r.seedRows(ctx, n, 0, batched)
}

// seedRows is seed, with the upserts going over rows rows in turn when
// rows is positive (updates after the first rows upserts).
func (r *runner) seedRows(ctx context.Context, n, rows int, batched bool) (int64, error) {
	c, err := r.client(0, sspclient.Options{MaxOperationsPerRequest: seedBatch})
	if err != nil {
		return 0, err
	}
	if _, err := c.Sync(ctx); err != nil { // acquires the log epoch
		return 0, fmt.Errorf("seed: %w", err)
	}
	var done atomic.Int64
	line := &rateLine{what: "seed", unit: "rows"}
	r.status(func(el time.Duration) string { return line.render(el, int(done.Load()), 0) })
	defer r.stopStatus()
	prefix := "s" + r.cfg.Scope
	var last int64
	start := time.Now()
	for k := 0; k < n; k += seedBatch {
		m := min(seedBatch, n-k)
		if err := r.upsertN(c, prefix, r.cfg.Scope, k, m, rows, batched); err != nil {
			return 0, err
		}
		res, err := c.Push(ctx)
		if err != nil {
			return 0, r.fail(fmt.Errorf("seed: %w", err))
		}
		if _, seq := r.checkPushed(res); seq > last {
			last = seq
		}
		if c.Pending() > 0 {
			return 0, r.fail(fmt.Errorf("seed: %d commits not settled", c.Pending()))
		}
		done.Add(int64(m))
	}
	r.res.add("seeded rows/s (push)", float64(n)/time.Since(start).Seconds(), "1/s")
	return last, nil
}
