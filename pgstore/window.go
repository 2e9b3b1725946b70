package pgstore

import (
	"context"
	"fmt"

	"github.com/syncgo/syncgo/store"
	"github.com/syncgo/syncgo/wire"
)

// ReadCommitWindow reads the commits of (AfterSeq, ThroughSeq] that change
// rows of the table inside the effective scopes. Candidates come from the
// change scope index on the first key (sqlCommitWindow), a page of commits
// per statement; every change is checked against every key with
// store.MatchScopes. A commit that would take the changes past
// LimitChanges stops the scan (Complete false), unless it is the first.
func (s *Store) ReadCommitWindow(ctx context.Context, partition string, q store.CommitWindowQuery) (store.CommitWindow, error) {
	ts, err := s.table(q.Table)
	if err != nil {
		return store.CommitWindow{}, err
	}
	if len(q.Scopes) == 0 {
		return store.CommitWindow{}, scanRequiresScope()
	}
	first, _, ok := splitScopes(q.Scopes)
	if !ok || q.ThroughSeq <= q.AfterSeq {
		return store.CommitWindow{Complete: true}, nil
	}
	page := defaultWindowPageCommits
	if q.LimitChanges > 0 {
		// Every matching commit has a matching change, so limit+1
		// candidates decide the answer unless the other keys filter some
		// out; then the next pages grow.
		page = min(q.LimitChanges+1, defaultWindowPageCommits)
	}
	w := windowReader{limit: q.LimitChanges, scopes: q.Scopes}
	after := q.AfterSeq
	for {
		candidates, last, err := w.readPage(ctx, s, partition, ts.name, first, after, q.ThroughSeq, page)
		if err != nil {
			return store.CommitWindow{}, fmt.Errorf("read commit window: %w", err)
		}
		if w.full {
			return store.CommitWindow{Commits: w.commits}, nil
		}
		if candidates < page {
			return store.CommitWindow{Commits: w.commits, Complete: true}, nil
		}
		after, page = last, min(2*page, defaultWindowPageCommits)
	}
}

// windowReader accumulates the commits of a window.
type windowReader struct {
	limit   int
	scopes  wire.ScopeMap
	commits []store.Commit
	changes int
	// full is set when a matching commit did not fit.
	full bool
}

// readPage reads the candidates of one page and adds the matching commits
// until one does not fit. It returns the number of candidates and the
// last candidate sequence.
func (w *windowReader) readPage(ctx context.Context, s *Store, partition, table string, first wire.ScopeValues, after, through int64, page int) (int, int64, error) {
	rows, err := s.pool.Query(ctx, sqlCommitWindow, partition, table, first.Key, first.Values, after, through, page)
	if err != nil {
		return 0, 0, err
	}
	defer rows.Close()
	var (
		candidates int
		last       int64
		cur        *store.Commit
		valid      bool
	)
	flush := func() {
		if cur == nil || !valid || len(cur.Changes) == 0 || w.full {
			return
		}
		if w.limit > 0 && len(w.commits) > 0 && w.changes+len(cur.Changes) > w.limit {
			w.full = true
			return
		}
		w.commits = append(w.commits, *cur)
		w.changes += len(cur.Changes)
	}
	for rows.Next() {
		var (
			seq                                int64
			createdAt, rowVersion              *int64
			actor, client, clientCommit, rowID *string
			op                                 *int16
			scopes, payload                    []byte
		)
		if err := rows.Scan(&seq, &createdAt, &actor, &client, &clientCommit, &rowID, &op, &rowVersion, &scopes, &payload); err != nil {
			return 0, 0, err
		}
		if cur == nil || seq != last {
			flush()
			if w.full {
				return candidates, last, nil
			}
			candidates++
			last = seq
			// A commit pruned while the window was read has no row.
			valid = createdAt != nil
			cur = &store.Commit{Seq: seq}
			if valid {
				cur.CreatedAtMs, cur.ActorID, cur.ClientID, cur.ClientCommitID = *createdAt, *actor, *client, *clientCommit
			}
		}
		if rowID == nil || !valid {
			continue
		}
		ch := store.Change{Table: table, RowID: *rowID, Op: wire.Op(*op), Payload: payload}
		if rowVersion != nil {
			ch.RowVersion = *rowVersion
		}
		if ch.Scopes, err = decodeScopes(scopes); err != nil {
			return 0, 0, err
		}
		if store.MatchScopes(ch.Scopes, w.scopes) {
			cur.Changes = append(cur.Changes, ch)
		}
	}
	if err := rows.Err(); err != nil {
		return 0, 0, err
	}
	flush()
	return candidates, last, nil
}
