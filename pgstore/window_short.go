package pgstore

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/syncgo/syncgo/store"
	"github.com/syncgo/syncgo/wire"
)

// shortWindowCommits is the longest range of the log (ThroughSeq minus
// AfterSeq) that a commit window reads without its candidate walk: a
// push+pull round's window spans the commits the other clients made since
// its last round, a range of the order of the clients pushing.
const shortWindowCommits = 128

// sqlShortWindowChanges is sqlRangeChanges over (after, through] with the
// changes outside the first scope key's values left out in SQL (a filter
// on the range scan's rows, on the stored scopes in either JSON form): a
// prefilter only, since store.MatchScopes checks every key of every change
// read. A change it keeps for a value of $5 is one whose commit the
// candidate walk would list.
var sqlShortWindowChanges = `SELECT commit_seq, NULL::bigint, NULL::text, NULL::text, NULL::text,
       row_id, op, row_version, scopes, payload
  FROM sync_changes
 WHERE partition = $1 AND commit_seq >= $3 AND commit_seq <= $4 AND tbl = $2
   AND ` + sqlJSONDocument("scopes") + ` ->> $5 = ANY($6::text[])
 ORDER BY commit_seq, idx`

// readShortWindow reads a window of at most shortWindowCommits commits in
// one round trip: every commit row of the range and the table's changes of
// the range in the first key's values, merged as readPage merges a dense
// page (every sequence of the range a candidate), then the partition and
// the serve gate after them when asked. It replaces the candidate walk's
// round trip: the range is short enough that reading it whole costs less.
func (w *windowReader) readShortWindow(ctx context.Context, s *Store, partition, table string, first wire.ScopeValues, after, through int64) (store.CommitWindow, error) {
	w.cands = w.cands[:0]
	for seq := after + 1; seq <= through; seq++ {
		w.cands = append(w.cands, seq)
	}
	w.commits = make([]store.Commit, 0, len(w.cands))
	w.chs = make([]store.Change, 0, len(w.cands))
	b := &pgx.Batch{}
	b.Queue(sqlRangeCommits, partition, after+1, through)
	b.Queue(sqlShortWindowChanges, partition, table, after+1, through, first.Key, first.Values)
	if w.running != nil {
		queuePartitionState(b, partition, *w.running)
	}
	br := s.pool.SendBatch(ctx, b)
	win, err := w.readShortResults(br, partition, table)
	if cerr := br.Close(); err == nil && cerr != nil {
		err = cerr
	}
	if err != nil {
		return store.CommitWindow{}, fmt.Errorf("read commit window: %w", err)
	}
	return win, nil
}

func (w *windowReader) readShortResults(br pgx.BatchResults, partition, table string) (store.CommitWindow, error) {
	if err := w.readHeads(br, w.cands); err != nil {
		return store.CommitWindow{}, err
	}
	rows, err := br.Query()
	if err != nil {
		return store.CommitWindow{}, err
	}
	if _, _, err := w.readRows(rows, table, w.cands); err != nil {
		return store.CommitWindow{}, err
	}
	if w.running != nil {
		st, err := readPartitionState(br, partition)
		if err != nil {
			return store.CommitWindow{}, err
		}
		w.state = &st
	}
	// Every commit of the range was read: the window is complete unless
	// a commit did not fit the limit.
	return store.CommitWindow{Commits: w.commits, Complete: !w.full, State: w.state}, nil
}
