package engine

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/syncgo/syncgo/store"
	"github.com/syncgo/syncgo/wire"
)

// Catch-up by segments (§8.4): a pull whose cursor is far behind the head
// is told to bootstrap again (a reset section, §4.6) when the snapshot of
// its scope is small beside the log it would replay. The reset, not a
// bootstrap answered to the cursor itself, because a client clears its
// rows of the scope only on the first page of a fresh bootstrap (§5.6: a
// request with cursor -1): segments sent to a pull with a cursor would
// leave the rows deleted in the gap on the client.
//
// The test, in order of cost:
//   - the gap (head - cursor) exceeds Limits.CatchUpBootstrapAfter and the
//     request's limitCommits (one window would not do);
//   - a change to the table carries a value of the subscription's first
//     scope variable after the cursor (the replay is not empty);
//   - the rows holding a value of the first scope variable, a bound of
//     the snapshot's rows, are at most half the gap and at most
//     maxCatchUpWalk (a count of at most that many entries of the row
//     scope index, plus one, remembered for a minute: the windows of a
//     catch-up that replays count once, and ask nothing after).
//
// A client that bootstraps slower than the log grows could be reset again
// after its bootstrap; a replay would fall behind the same way.

// mayResetCatchUp is catchUpReset's first test, which reads nothing: a
// gap longer than Limits.CatchUpBootstrapAfter and than one window.
func (r *request) mayResetCatchUp(sub *wire.Subscription, eff wire.ScopeMap, p store.Partition, lim pullLimits) bool {
	after := r.e.cfg.Limits.CatchUpBootstrapAfter
	gap := p.MaxCommitSeq - sub.Cursor
	return after >= 0 && gap > after && gap > int64(lim.commits) && len(eff) > 0
}

// maxCatchUpWalk bounds the index count of the row test, which is in the
// pull's path: a scope with more rows is replayed, whatever the gap
// (10,001 entries: ~1 ms on SQLite, ~3 ms on Postgres,
// BenchmarkScanPages/CatchUpRowBound).
const maxCatchUpWalk = 10_000

// rowFloorTTL is how long a count's answer is used.
const rowFloorTTL = time.Minute

// maxRowFloors bounds the remembered answers.
const maxRowFloors = 4096

type rowFloorKey struct {
	partition, epoch, table, digest string
}

// rowFloor is what a count proved: at most over rows (atMost), or more
// than over.
type rowFloor struct {
	over   int64
	atMost bool
	at     time.Time
}

// rowFloors remembers the counts of the row scope index by scope.
type rowFloors struct {
	mu    sync.Mutex
	m     map[rowFloorKey]rowFloor
	order []rowFloorKey
}

// known answers from a remembered count whether the rows of k are at
// most n.
func (f *rowFloors) known(k rowFloorKey, n int64) (small, ok bool) {
	f.mu.Lock()
	got, found := f.m[k]
	f.mu.Unlock()
	if !found || time.Since(got.at) >= rowFloorTTL {
		return false, false
	}
	switch {
	case !got.atMost && got.over >= n: // more than got.over >= n rows
		return false, true
	case got.atMost && got.over <= n: // at most got.over <= n rows
		return true, true
	}
	return false, false
}

// smallScope reports whether the rows of scope are at most n, counting
// them in the index (at most n+1), and remembers the answer.
func (f *rowFloors) smallScope(ctx context.Context, st store.Store, k rowFloorKey, scope wire.ScopeValues, n int64) (bool, error) {
	now := time.Now()
	var small bool
	if c, ok := st.(store.ScopeRowCounter); ok {
		rows, err := c.CountScopeRows(ctx, k.partition, k.table, scope, int(n)+1)
		if err != nil {
			return false, fmt.Errorf("catch-up rows: %w", err)
		}
		small = rows <= int(n)
	} else {
		bounds, err := st.PageBoundaries(ctx, k.partition, store.RowScanQuery{Table: k.table,
			Scopes: wire.ScopeMap{scope}, Limit: int(n), NoScopes: true}, 1)
		if err != nil {
			return false, fmt.Errorf("catch-up rows: %w", err)
		}
		small = len(bounds) == 0 // no page of n rows with a row after it
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.m == nil {
		f.m = map[rowFloorKey]rowFloor{}
	}
	if _, had := f.m[k]; !had {
		f.order = append(f.order, k)
		for len(f.order) > maxRowFloors {
			delete(f.m, f.order[0])
			f.order = f.order[1:]
		}
	}
	f.m[k] = rowFloor{over: n, atMost: small, at: now}
	return small, nil
}

// catchUpReset reports whether a subscription at cursor (no resume
// token, cursor within [horizon, head]) should bootstrap again rather
// than replay the log (§8.4).
func (r *request) catchUpReset(ctx context.Context, sub *wire.Subscription, eff wire.ScopeMap, p store.Partition, lim pullLimits) (bool, error) {
	if !r.mayResetCatchUp(sub, eff, p, lim) {
		return false, nil
	}
	gap := p.MaxCommitSeq - sub.Cursor
	n := min(gap/2, maxCatchUpWalk)
	k := rowFloorKey{partition: r.auth.Partition, epoch: p.LogEpoch, table: sub.Table,
		digest: wire.ScopeDigest(map[string][]string{eff[0].Key: eff[0].Values})}
	small, known := r.e.rowFloors.known(k, n)
	if known && !small {
		// A catch-up that replays asks at every window: no query.
		return false, nil
	}
	latest, err := r.e.cfg.Store.LatestScopedChangeSeq(ctx, r.auth.Partition, sub.Table, eff[0])
	if err != nil {
		return false, fmt.Errorf("catch-up: %w", err)
	}
	if latest <= sub.Cursor || known {
		return latest > sub.Cursor && small, nil
	}
	return r.e.rowFloors.smallScope(ctx, r.e.cfg.Store, k, eff[0], n)
}
