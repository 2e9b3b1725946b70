package bench

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/syncgo/syncgo/wire"
)

// runBootstrap: seed a table of Rows rows in the run's scope (unless
// Seeded), then a fresh client bootstraps the scope by rows segments
// (accept inline and external rows; with SQLite also sqlite images),
// limitSnapshotRows 10000, maxSnapshotPages 50. It runs twice: cold (the
// first bootstrap of this snapshot: pages and segments are built) and
// warm (a second fresh client, served from the shared pages).
func runBootstrap(ctx context.Context, r *runner) error {
	r.res.Params["rows"], r.res.Params["seeded"], r.res.Params["sqlite"] = r.cfg.Rows, r.cfg.Seeded, r.cfg.SQLite
	r.res.Params["urls"] = r.cfg.URLs
	if !r.cfg.Seeded {
		if _, err := r.seed(ctx, r.cfg.Rows, true); err != nil {
			return err
		}
	}
	accept := wire.AcceptInlineRows | wire.AcceptExternalRows
	if r.cfg.SQLite {
		accept |= wire.AcceptSQLite
	}
	if r.cfg.URLs {
		accept |= wire.AcceptSignedURLs
	}
	for _, pass := range []string{"cold", "warm"} {
		p := r.newPuller(0, wire.PullHeader{LimitSnapshotRows: 10000, MaxSnapshotPages: 50, Accept: accept}, -1)
		err := r.bootstrapOnce(ctx, p, pass)
		p.close()
		if err != nil {
			return err
		}
	}
	return nil
}

func (r *runner) bootstrapOnce(ctx context.Context, p *puller, pass string) error {
	if r.cfg.Wire >= wire.Version2 {
		if _, err := p.round(ctx); err != nil { // acquires the log epoch
			return fmt.Errorf("epoch acquisition: %w", err)
		}
	}
	var rows atomic.Int64
	line := &rateLine{what: "bootstrap " + pass, unit: "rows"}
	r.status(func(el time.Duration) string { return line.render(el, int(rows.Load()), 0) })
	defer r.stopStatus()
	var total pullStats
	rounds := 0
	bytes0 := r.bytesIn.Load()
	start := time.Now()
	for {
		st, err := p.round(ctx)
		if err != nil {
			return r.fail(err)
		}
		rounds++
		rows.Add(int64(st.rows))
		total.rows += st.rows
		total.segments += st.segments
		total.images += st.images
		total.refs += st.refs
		total.urls += st.urls
		if !st.epoch && !st.pending {
			break
		}
		if rounds > 10_000 {
			return r.fail(fmt.Errorf("bootstrap not complete after %d rounds", rounds))
		}
	}
	elapsed := time.Since(start)
	if !r.cfg.Seeded && total.rows != r.cfg.Rows {
		r.fail(fmt.Errorf("bootstrap %s: %d rows, want %d", pass, total.rows, r.cfg.Rows))
	}
	r.res.add(pass+" rows", float64(total.rows), "")
	r.res.addMs(pass+" bootstrap time", elapsed)
	r.res.add(pass+" rows/s", float64(total.rows)/elapsed.Seconds(), "1/s")
	r.res.add(pass+" bytes received", float64(r.bytesIn.Load()-bytes0), "B")
	r.res.add(pass+" segments", float64(total.segments), "")
	r.res.add(pass+" segments by reference", float64(total.refs), "")
	if r.cfg.URLs {
		r.res.add(pass+" segments by signed URL", float64(total.urls), "")
	}
	if r.cfg.SQLite {
		r.res.add(pass+" sqlite images", float64(total.images), "")
	}
	r.res.add(pass+" rounds", float64(rounds), "")
	return nil
}
