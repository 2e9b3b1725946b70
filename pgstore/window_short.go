package pgstore

import (
	"context"
	"errors"
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

// shortWindowRows is the most changes a short window read returns (its
// statement's LIMIT): a read that reaches it may have cut a commit, and
// the window is read by the paged reads instead (errShortWindowCut),
// which bound what they read by the change limit. A round's window holds
// a few changes per commit.
const shortWindowRows = 1024

// errShortWindowCut reports a short window read that reached its row
// limit.
var errShortWindowCut = errors.New("short window read reached its row limit")

// sqlShortWindow reads the table's changes of (after, through] whose
// value of the first scope key ($5) is one of $6, at most $7 of them, each
// with its commit's row: one index range scan of the changes
// (sync_changes_by_table in the plan of a rounds run) with the scope test
// on each row (the stored scopes in either JSON form), and a primary-key
// probe of the commit per change kept (the subqueries' LIMITs keep the
// planner from joining the two ranges otherwise; see sqlCommitWindow). It
// has sqlCommitWindow's columns; a commit pruned while the window is read
// has its commit columns NULL. The scope test is a prefilter only:
// store.MatchScopes checks every key of every change read, and every
// change it accepts has a first-key value in $6.
var sqlShortWindow = `SELECT ch.commit_seq, m.created_at_ms, m.actor_id, m.client_id, m.client_commit_id,
       ch.row_id, ch.op, ch.row_version, ch.scopes, ch.payload
  FROM (SELECT commit_seq, idx, row_id, op, row_version, scopes, payload FROM sync_changes
         WHERE partition = $1 AND commit_seq > $3 AND commit_seq <= $4 AND tbl = $2
           AND ` + sqlJSONKey("scopes", "$5") + ` = ANY($6::text[])
        ORDER BY commit_seq, idx LIMIT $7) ch
  LEFT JOIN LATERAL (
    SELECT created_at_ms, actor_id, client_id, client_commit_id FROM sync_commits
     WHERE partition = $1 AND commit_seq = ch.commit_seq
     LIMIT 1) m ON TRUE
 ORDER BY ch.commit_seq, ch.idx`

// readShortWindow reads a window of at most shortWindowCommits commits in
// one round trip (sqlShortWindow), then the partition and the serve gate
// after its rows when asked. It replaces the candidate walk's round trip
// and costs what the matching changes cost, however many other commits
// the range holds.
func (w *windowReader) readShortWindow(ctx context.Context, s *Store, partition, table string, first wire.ScopeValues, after, through int64) (store.CommitWindow, error) {
	b := &pgx.Batch{}
	b.Queue(sqlShortWindow, partition, table, after, through, first.Key, first.Values, s.shortRows)
	if w.running != nil {
		queuePartitionState(b, partition, *w.running)
	}
	br := s.pool.SendBatch(ctx, b)
	win, err := w.readShortResults(br, partition, table, s.shortRows)
	if cerr := br.Close(); err == nil && cerr != nil {
		err = cerr
	}
	if err != nil && !errors.Is(err, errShortWindowCut) {
		err = fmt.Errorf("read commit window: %w", err)
	}
	return win, err
}

func (w *windowReader) readShortResults(br pgx.BatchResults, partition, table string, limit int64) (store.CommitWindow, error) {
	rows, err := br.Query()
	if err != nil {
		return store.CommitWindow{}, err
	}
	if _, _, err := w.readRows(rows, table, nil, false); err != nil {
		return store.CommitWindow{}, err
	}
	// The rows were read to their end or closed (readRows): the tag
	// counts every row sent. At the limit, the last commit read may lack
	// changes, unless it did not fit the change limit anyway (then every
	// commit kept ended before it).
	if !w.full && rows.CommandTag().RowsAffected() >= limit {
		return store.CommitWindow{}, errShortWindowCut
	}
	if w.running != nil {
		st, err := readPartitionState(br, partition)
		if err != nil {
			return store.CommitWindow{}, err
		}
		w.state = &st
	}
	// Every change of the range that may match was read: the window is
	// complete unless a commit did not fit the limit.
	return store.CommitWindow{Commits: w.commits, Complete: !w.full, State: w.state}, nil
}
