package pgstore

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"

	"github.com/syncgo/syncgo/store"
)

// Reading ahead. A Write told what its function reads first
// (WriteReadAhead: the push result of its commit, the rows of its
// operations) has it read in the batch's first round trip, with the reads
// of the other Writes of the batch, the serve gate and the partition lock:
// the commits of the batch then run without a round trip each. What is
// read ahead answers a call until a write of the batch to the same key
// (any commit's: each write forgets the key), so it is what a read would
// return at the call. A rolled-back savepoint only undoes writes, whose
// keys were forgotten, so it invalidates nothing read ahead; a commit's
// own reads (the tombstone read with each row) are dropped with its
// rolled-back Candidate.

// maxReadAheadRows bounds the rows a batch reads ahead; the rows past it
// are read when asked for.
const maxReadAheadRows = 2048

// rowKey names a row.
type rowKey struct{ table, rowID string }

// journalKey names a push result.
type journalKey struct{ clientID, clientCommitID string }

// journalRead is a push result read: its error is nil, ErrNotFound or
// ErrUnreadable.
type journalRead struct {
	rec store.PushRecord
	err error
}

// readAhead are reads answered before they were asked.
type readAhead struct {
	rows    map[rowKey]store.Row // an absent row: Row{} (empty RowID)
	tombs   map[rowKey]int64     // no tombstone: -1
	journal map[journalKey]journalRead
}

// putRow keeps a row and its tombstone read.
func (r *readAhead) putRow(k rowKey, row store.Row, tomb int64) {
	if r.rows == nil {
		r.rows, r.tombs = map[rowKey]store.Row{}, map[rowKey]int64{}
	}
	r.rows[k], r.tombs[k] = row, tomb
}

// WriteReadAhead is Write with the reads fn starts with, which the batch
// reads ahead (see "Reading ahead").
func (s *Store) WriteReadAhead(ctx context.Context, partition string, reads store.WriteReads, fn func(ctx context.Context, tx store.WriteTx) error) error {
	return s.write(ctx, partition, &reads, fn)
}

var _ store.ReadAheadWriter = (*Store)(nil)

// textOK reports whether s can be a TEXT parameter: well-formed UTF-8
// without NUL (anything else fails the statement, and the transaction).
func textOK(s string) bool { return utf8.ValidString(s) && !strings.ContainsRune(s, 0) }

// readAhead queues, as deferred statements of the batch's first round
// trip, the serve gate at the running schema version and the reads of
// the requests: their push results in one statement, and the rows and
// tombstones of each table in one statement each.
func (b *batch) readAhead(reqs []*writeReq) {
	st := b.s.schema.Load()
	if st == nil || !slices.ContainsFunc(reqs, func(r *writeReq) bool { return r.reads != nil }) {
		return // no push: the batch reads what its functions ask for
	}
	running := int32(st.version)
	b.aheadPending = true
	b.pending = append(b.pending, deferred{what: "read ahead: serve gate", sql: sqlServeGate, args: []any{b.partition, running}, ctl: true,
		scan: func(r pgx.Row) error {
			g, err := readServeGate(r)
			if err == nil {
				b.gate = &cachedGate{running: running, gate: g}
			}
			return err
		}})
	var (
		clients, commits []string
		journals         = map[journalKey]bool{}
		tables           []*tableSQL
		ids              = map[*tableSQL][]string{}
		seen             = map[rowKey]bool{}
	)
	for _, r := range reqs {
		if r.reads == nil {
			continue
		}
		for i := -1; i < len(r.reads.MoreCommitIDs); i++ {
			k := journalKey{r.reads.ClientID, r.reads.ClientCommitID}
			if i >= 0 {
				k.clientCommitID = r.reads.MoreCommitIDs[i]
			}
			if k.clientID != "" && !journals[k] && textOK(k.clientID) && textOK(k.clientCommitID) {
				journals[k] = true
				clients, commits = append(clients, k.clientID), append(commits, k.clientCommitID)
			}
		}
		for _, rk := range r.reads.Rows {
			k := rowKey{rk.Table, rk.RowID}
			if len(seen) == maxReadAheadRows || seen[k] || !textOK(k.rowID) {
				continue
			}
			ts, err := st.table(k.table)
			if err != nil {
				continue
			}
			seen[k] = true
			if ids[ts] == nil {
				tables = append(tables, ts)
			}
			ids[ts] = append(ids[ts], k.rowID)
		}
	}
	if len(journals) > 0 {
		b.pending = append(b.pending, deferred{what: "read ahead: push results", sql: sqlPushResults, args: []any{b.partition, clients, commits}, ctl: true,
			rows: func(rows pgx.Rows) error {
				b.ahead.journal = make(map[journalKey]journalRead, len(journals))
				var (
					k    journalKey
					body []byte
				)
				_, err := pgx.ForEachRow(rows, []any{&k.clientID, &k.clientCommitID, &body}, func() error {
					rec, err := decodePushRecord(body)
					b.ahead.journal[k] = journalRead{rec, err}
					return nil
				})
				if err != nil {
					return err
				}
				for k := range journals {
					if _, ok := b.ahead.journal[k]; !ok {
						b.ahead.journal[k] = journalRead{err: store.ErrNotFound}
						b.absent[k] = true
					}
				}
				return nil
			}})
	}
	if len(tables) == 0 {
		return
	}
	var tombTables, tombIDs []string
	for _, ts := range tables {
		rowIDs := ids[ts]
		for _, id := range rowIDs {
			tombTables, tombIDs = append(tombTables, ts.name), append(tombIDs, id)
		}
		b.pending = append(b.pending, deferred{what: "read ahead: rows", sql: ts.selectRows, args: []any{b.partition, rowIDs}, ctl: true,
			rows: func(rows pgx.Rows) error {
				found, err := collectRows(rows, ts.name)
				if err != nil {
					return err
				}
				if b.ahead.rows == nil {
					b.ahead.rows, b.ahead.tombs = map[rowKey]store.Row{}, map[rowKey]int64{}
				}
				for _, id := range rowIDs {
					b.ahead.rows[rowKey{ts.name, id}] = store.Row{}
					b.ahead.tombs[rowKey{ts.name, id}] = -1
				}
				for _, row := range found {
					b.ahead.rows[rowKey{ts.name, row.RowID}] = row
				}
				return nil
			}})
	}
	b.pending = append(b.pending, deferred{what: "read ahead: tombstones", sql: sqlTombstones, args: []any{b.partition, tombTables, tombIDs}, ctl: true,
		rows: func(rows pgx.Rows) error {
			var (
				k   rowKey
				seq int64
			)
			_, err := pgx.ForEachRow(rows, []any{&k.table, &k.rowID, &seq}, func() error {
				b.ahead.tombs[k] = seq
				return nil
			})
			return err
		}})
}

// scanTombstone reads a tombstone read's answer: its sequence, or -1.
func scanTombstone(r pgx.Row) (int64, error) {
	var seq int64
	if err := r.Scan(&seq); errors.Is(err, pgx.ErrNoRows) {
		return -1, nil
	} else if err != nil {
		return 0, err
	}
	return seq, nil
}

// settle sends the batch's reads ahead if they still wait, so that a
// call finds them answered rather than reading again.
func (t *writeTx) settle(ctx context.Context) error {
	if !t.b.aheadPending || t.done {
		return nil
	}
	return t.b.flush(ctx, t)
}

// aheadRow returns a row read ahead (by the commit or its batch).
func (t *writeTx) aheadRow(k rowKey) (store.Row, bool) {
	if row, ok := t.reads.rows[k]; ok {
		return row, true
	}
	row, ok := t.b.ahead.rows[k]
	return row, ok
}

// aheadTomb returns a tombstone read ahead.
func (t *writeTx) aheadTomb(k rowKey) (int64, bool) {
	if seq, ok := t.reads.tombs[k]; ok {
		return seq, true
	}
	seq, ok := t.b.ahead.tombs[k]
	return seq, ok
}

// forgetRow drops what was read ahead of a row the commit writes.
func (t *writeTx) forgetRow(k rowKey) {
	delete(t.reads.rows, k)
	delete(t.b.ahead.rows, k)
}

// forgetTomb drops what was read ahead of a tombstone the commit writes.
func (t *writeTx) forgetTomb(k rowKey) {
	delete(t.reads.tombs, k)
	delete(t.b.ahead.tombs, k)
}

// Row reads a current row on the transaction's connection, and in the
// same round trip the row's tombstone, which an insert asks for next; a
// row read ahead is answered without a round trip.
func (t *writeTx) Row(ctx context.Context, table, rowID string) (store.Row, error) {
	ts, err := t.table(table)
	if err != nil {
		return store.Row{}, err
	}
	k := rowKey{table, rowID}
	if err := t.settle(ctx); err != nil {
		return store.Row{}, fmt.Errorf("row: %w", err)
	}
	if row, ok := t.aheadRow(k); ok {
		if err := t.usable(ctx); err != nil {
			return store.Row{}, err
		}
		if row.RowID == "" {
			return store.Row{}, store.ErrNotFound
		}
		return row, nil
	}
	br, err := t.send(ctx, func(b *pgx.Batch) {
		b.Queue(ts.selectRow, t.partition, rowID)
		b.Queue(sqlTombstone, t.partition, table, rowID)
	})
	if err != nil {
		return store.Row{}, fmt.Errorf("row: %w", err)
	}
	row, err := scanRow(br.QueryRow(), table)
	if errors.Is(err, store.ErrNotFound) {
		row, err = store.Row{}, nil
	}
	var seq int64
	if err == nil {
		seq, err = scanTombstone(br.QueryRow())
	}
	if err = closeBatch(br, err); err != nil {
		return store.Row{}, fmt.Errorf("row: %w", err)
	}
	t.reads.putRow(k, row, seq)
	if row.RowID == "" {
		return store.Row{}, store.ErrNotFound
	}
	return row, nil
}

// Tombstone reads the row's delete tombstone; one read ahead (or with the
// row) is answered without a round trip.
func (t *writeTx) Tombstone(ctx context.Context, table, rowID string) (int64, bool, error) {
	if err := t.settle(ctx); err != nil {
		return 0, false, fmt.Errorf("tombstone: %w", err)
	}
	if seq, ok := t.aheadTomb(rowKey{table, rowID}); ok {
		if err := t.usable(ctx); err != nil {
			return 0, false, err
		}
		if seq < 0 {
			return 0, false, nil
		}
		return seq, true, nil
	}
	br, err := t.send(ctx, func(b *pgx.Batch) { b.Queue(sqlTombstone, t.partition, table, rowID) })
	if err != nil {
		return 0, false, fmt.Errorf("tombstone: %w", err)
	}
	seq, err := scanTombstone(br.QueryRow())
	if err = closeBatch(br, err); err != nil {
		return 0, false, fmt.Errorf("tombstone: %w", err)
	}
	if seq < 0 {
		return 0, false, nil
	}
	return seq, true, nil
}

// PushResult reads the journal on the transaction's connection; a record
// read ahead is answered without a round trip. A record read absent is
// noted: under the partition lock nobody else writes the partition's
// journal, so a PutPushResult of it stores.
func (t *writeTx) PushResult(ctx context.Context, clientID, clientCommitID string) (store.PushRecord, error) {
	key := journalKey{clientID, clientCommitID}
	if err := t.settle(ctx); err != nil {
		return store.PushRecord{}, fmt.Errorf("push result: %w", err)
	}
	if j, ok := t.b.ahead.journal[key]; ok {
		if err := t.usable(ctx); err != nil {
			return store.PushRecord{}, err
		}
		return j.rec, j.err
	}
	br, err := t.send(ctx, func(b *pgx.Batch) { b.Queue(sqlPushResult, t.partition, clientID, clientCommitID) })
	if err != nil {
		return store.PushRecord{}, fmt.Errorf("push result: %w", err)
	}
	rec, err := scanPushRecord(br.QueryRow())
	if err = closeBatch(br, err); err != nil {
		if errors.Is(err, store.ErrNotFound) {
			t.b.absent[key] = true
		}
		return store.PushRecord{}, fmt.Errorf("push result: %w", err)
	}
	return rec, nil
}

// usable is what a call answered without a round trip checks.
func (t *writeTx) usable(ctx context.Context) error {
	if t.done {
		return errTxDone
	}
	return ctx.Err()
}
