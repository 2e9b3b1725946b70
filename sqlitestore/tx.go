package sqlitestore

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/syncgo/syncgo/store"
	"github.com/syncgo/syncgo/wire"
)

// Write runs fn under the partition's write boundary: the single writer.
// It needs no ensured schema, as on Postgres: what touches only the core
// tables (the barrier's AdvanceCheckpoint, the serve gate, the push-result
// journal) works before EnsureSchema, and what needs the schema (rows,
// appends) fails with store.ErrNoSchema. A backfill runs so, from an
// operator command that does not ensure the schema.
func (s *Store) Write(ctx context.Context, partition string, fn func(ctx context.Context, tx store.WriteTx) error) error {
	cs, _ := s.compiled() // nil before EnsureSchema
	return s.w.do(ctx, func(ctx context.Context, c *conn) error {
		tx := &writeTx{s: s, c: c, cs: cs, partition: partition}
		return fn(ctx, tx)
	})
}

// writeTx implements store.WriteTx on the writer's connection. Its
// statements are never interrupted (the writer's connection has no
// interrupt set): a caller that gives up must not interrupt a statement of
// the shared batch; each call checks the caller's context first instead.
type writeTx struct {
	s         *Store
	c         *conn
	cs        *compiledSchema // nil before EnsureSchema
	partition string
	depth     int
}

func (tx *writeTx) Partition() string { return tx.partition }

func (tx *writeTx) table(name string) (*tableSQL, error) {
	if tx.cs == nil {
		return nil, store.ErrNoSchema
	}
	t, ok := tx.cs.tables[name]
	if !ok {
		return nil, fmt.Errorf("%w: %q", store.ErrUnknownTable, name)
	}
	return t, nil
}

func (tx *writeTx) Row(ctx context.Context, table, rowID string) (store.Row, error) {
	defer tx.c.enterHot().exitHot() // a push's (batchcache.go)
	if err := ctx.Err(); err != nil {
		return store.Row{}, err
	}
	t, err := tx.table(table)
	if err != nil {
		return store.Row{}, err
	}
	return scanRow(tx.c.queryRow(t.selectBy, tx.partition, rowID), table)
}

func (tx *writeTx) Tombstone(ctx context.Context, table, rowID string) (int64, bool, error) {
	defer tx.c.enterHot().exitHot() // a push's (batchcache.go)
	if err := ctx.Err(); err != nil {
		return 0, false, err
	}
	var seq int64
	err := tx.c.queryRow(`SELECT t.commit_seq FROM sync_tombstones t
LEFT JOIN sync_partitions p ON p.partition = t.partition
WHERE t.partition=? AND t.tbl=? AND t.row_id=? AND t.commit_seq > COALESCE(p.horizon_seq, 0)`,
		tx.partition, table, rowID).Scan(&seq)
	if errors.Is(err, errNoRows) {
		return 0, false, nil
	}
	if err != nil {
		return 0, false, fmt.Errorf("read tombstone: %w", err)
	}
	return seq, true, nil
}

func (tx *writeTx) ClearTombstone(ctx context.Context, table, rowID string) error {
	defer tx.c.enterHot().exitHot() // a push's (batchcache.go)
	if err := ctx.Err(); err != nil {
		return err
	}
	return tx.c.exec("DELETE FROM sync_tombstones WHERE partition=? AND tbl=? AND row_id=?", tx.partition, table, rowID)
}

func (tx *writeTx) UpsertRow(ctx context.Context, w store.RowWrite) error {
	defer tx.c.enterHot().exitHot() // a push's (batchcache.go)
	if err := ctx.Err(); err != nil {
		return err
	}
	t, err := tx.table(w.Table)
	if err != nil {
		return err
	}
	args := make([]any, 0, 6+len(t.t.Columns()))
	args = append(args, tx.partition, w.RowID)
	if t.t.Materialize() {
		vals := w.Values
		if vals == nil {
			if vals, err = t.t.RowCodec().DecodeRow(w.Payload); err != nil {
				// Kept as text: the engine encoded this payload, so a
				// failure is the server's, not the client's request's.
				return fmt.Errorf("upsert %s: payload: %v", w.Table, err)
			}
		}
		for i, col := range t.t.Columns() {
			args = append(args, sqlValue(col.Type, vals[i]))
		}
	}
	args = append(args, w.ServerVersion, string(store.EncodeScopes(w.Scopes)), w.Payload, nullBytes(w.ColumnVersions))
	if err := tx.c.exec(t.upsert, args...); err != nil {
		if isUniqueViolation(err) {
			return &store.ConstraintError{Table: w.Table, Constraint: violatedIndex(t, err), Err: err}
		}
		return fmt.Errorf("upsert %s: %w", w.Table, err)
	}
	// The row's scope index entries are brought to its scopes: those no
	// longer among them are deleted, the missing ones inserted. An update
	// that keeps its scopes, the common one, then deletes and inserts
	// nothing and writes none of the index's pages.
	prune := append(args[:0], tx.partition, w.Table, w.RowID)
	for _, sc := range w.Scopes {
		prune = append(prune, sc.Key, sc.Value)
	}
	if err := tx.c.exec(pruneScopesSQL(len(w.Scopes)), prune...); err != nil {
		return fmt.Errorf("upsert %s: scope index: %w", w.Table, err)
	}
	for _, sc := range w.Scopes {
		if err := tx.c.exec("INSERT OR IGNORE INTO sync_row_scopes(partition, tbl, var, value, row_id) VALUES (?,?,?,?,?)",
			tx.partition, w.Table, sc.Key, sc.Value, w.RowID); err != nil {
			return fmt.Errorf("upsert %s: scope index: %w", w.Table, err)
		}
	}
	return nil
}

// pruneScopesSQL deletes a row's scope index entries other than the n
// (variable, value) pairs bound after the partition, table and row id.
// It names the row's index: with conditions on var and value SQLite
// otherwise picks the primary key, whose prefix is every entry of the
// table (BenchmarkPushUpdate: 5 times the CPU per commit).
func pruneScopesSQL(n int) string {
	const base = "DELETE FROM sync_row_scopes INDEXED BY sync_row_scopes_by_row WHERE partition=? AND tbl=? AND row_id=?"
	if n == 0 {
		return base
	}
	return base + " AND NOT ((var=? AND value=?)" + strings.Repeat(" OR (var=? AND value=?)", n-1) + ")"
}

func (tx *writeTx) DeleteRow(ctx context.Context, table, rowID string) error {
	defer tx.c.enterHot().exitHot() // a push's (batchcache.go)
	if err := ctx.Err(); err != nil {
		return err
	}
	t, err := tx.table(table)
	if err != nil {
		return err
	}
	if err := tx.c.exec(t.deleteBy, tx.partition, rowID); err != nil {
		return fmt.Errorf("delete %s: %w", table, err)
	}
	if err := tx.c.exec("DELETE FROM sync_row_scopes WHERE partition=? AND tbl=? AND row_id=?", tx.partition, table, rowID); err != nil {
		return fmt.Errorf("delete %s: scope index: %w", table, err)
	}
	return nil
}

func (tx *writeTx) PushResult(ctx context.Context, clientID, clientCommitID string) (store.PushRecord, error) {
	defer tx.c.enterHot().exitHot() // a push's (batchcache.go)
	if err := ctx.Err(); err != nil {
		return store.PushRecord{}, err
	}
	return scanPushResult(tx.c.queryRow(selectPushResult, tx.partition, clientID, clientCommitID))
}

func (tx *writeTx) PutPushResult(ctx context.Context, clientID, clientCommitID string, rec store.PushRecord) (bool, error) {
	defer tx.c.enterHot().exitHot() // a push's (batchcache.go)
	if err := ctx.Err(); err != nil {
		return false, err
	}
	js, err := store.EncodePushRecord(rec)
	if err != nil {
		return false, fmt.Errorf("put push result: %w", err)
	}
	n, err := tx.c.execChanges(`INSERT INTO sync_push_results(partition, client_id, client_commit_id, result)
VALUES (?,?,?,?) ON CONFLICT DO NOTHING`, tx.partition, clientID, clientCommitID, string(js))
	if err != nil {
		return false, fmt.Errorf("put push result: %w", err)
	}
	return n == 1, nil
}

func (tx *writeTx) AppendCommit(ctx context.Context, nc store.NewCommit) (int64, error) {
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	if tx.cs == nil {
		return 0, store.ErrNoSchema // the version to stamp is the schema's
	}
	defer tx.c.enterHot().exitHot()
	seq, ok := tx.s.w.cache.next(tx.partition)
	if !ok {
		// The partition's first commit in the batch: the row is
		// incremented (or made) and read; the batch's next commits
		// number on from the cache, written to the row before COMMIT.
		err := tx.c.queryRow(`INSERT INTO sync_partitions(partition, max_commit_seq) VALUES (?, 1)
ON CONFLICT(partition) DO UPDATE SET max_commit_seq = max_commit_seq + 1 RETURNING max_commit_seq`, tx.partition).Scan(&seq)
		if err != nil {
			return 0, fmt.Errorf("append commit: sequence: %w", err)
		}
		tx.s.w.cache.stored(tx.partition, seq)
	}
	if err := tx.c.exec(`INSERT INTO sync_commits(partition, commit_seq, client_id, client_commit_id, actor_id, created_at_ms, writer_version)
VALUES (?,?,?,?,?,?,?)`, tx.partition, seq, nc.ClientID, nc.ClientCommitID, nc.ActorID, nc.CreatedAtMs, tx.cs.schema.Version()); err != nil {
		if isFenceRejection(err) {
			return 0, &store.Error{Code: store.CodeWriterFenceRejected, Message: "append rejected by the writer fence", Err: err}
		}
		return 0, fmt.Errorf("append commit: %w", err)
	}
	type scopeKey struct{ tbl, k, v string }
	var seen map[scopeKey]bool
	if len(nc.Changes) > 1 {
		seen = make(map[scopeKey]bool, len(nc.Changes))
	}
	scopes := make([][]byte, len(nc.Changes))
	for i, ch := range nc.Changes {
		var version any
		if ch.Op == wire.OpUpsert {
			version = ch.RowVersion
		}
		scopes[i] = store.EncodeScopes(ch.Scopes)
		if err := tx.c.exec(`INSERT INTO sync_changes(partition, commit_seq, idx, tbl, row_id, op, row_version, scopes, payload)
VALUES (?,?,?,?,?,?,?,?,?)`, tx.partition, seq, i, ch.Table, ch.RowID, int(ch.Op), version, string(scopes[i]), nullBytes(ch.Payload)); err != nil {
			return 0, fmt.Errorf("append commit: change %d: %w", i, err)
		}
		for _, sc := range ch.Scopes {
			if seen != nil {
				k := scopeKey{ch.Table, sc.Key, sc.Value}
				if seen[k] {
					continue
				}
				seen[k] = true
			}
			if err := tx.c.exec(`INSERT OR IGNORE INTO sync_change_scopes(partition, tbl, var, value, commit_seq) VALUES (?,?,?,?,?)`,
				tx.partition, ch.Table, sc.Key, sc.Value, seq); err != nil {
				return 0, fmt.Errorf("append commit: change scopes: %w", err)
			}
		}
		if ch.Op == wire.OpDelete {
			if err := tx.c.exec(`INSERT INTO sync_tombstones(partition, tbl, row_id, commit_seq) VALUES (?,?,?,?)
ON CONFLICT(partition, tbl, row_id) DO UPDATE SET commit_seq=excluded.commit_seq`, tx.partition, ch.Table, ch.RowID, seq); err != nil {
				return 0, fmt.Errorf("append commit: tombstone: %w", err)
			}
		}
	}
	tx.s.stats.commits.Add(1)
	tx.s.w.keep(tx.partition, seq, nc, scopes)
	return seq, nil
}

// Candidate runs fn in a savepoint. The first candidate of a request
// that has written nothing yet (a push's commit: its journal lookup is
// a read) uses the request's own savepoint, as pgstore's does: rolling
// back to it undoes exactly fn's writes, and the SAVEPOINT and RELEASE
// of one more level, two statements per commit on the writer, are
// saved. Any other opens one of its own.
func (tx *writeTx) Candidate(ctx context.Context, fn func(ctx context.Context) error) (err error) {
	if err := ctx.Err(); err != nil {
		return err
	}
	w := tx.s.w
	mark := len(w.pending)
	tx.depth++
	defer func() { tx.depth-- }()
	if tx.depth == 1 && tx.c.writes == w.savepointWrites {
		if err = fn(ctx); err != nil {
			w.pending = w.pending[:mark]
			w.rollbackTo(requestSavepoint, &err)
		}
		return err
	}
	name := fmt.Sprintf("c%d", tx.depth)
	if err := w.savepoint(name); err != nil {
		return fmt.Errorf("candidate: %w", err)
	}
	defer func() {
		if err != nil {
			w.pending = w.pending[:mark]
			w.rollbackTo(name, &err)
		}
		w.release(name, &err)
	}()
	return fn(ctx)
}

func nullBytes(b []byte) any {
	if b == nil {
		return nil
	}
	return b
}

// sqlValue converts a row value to what the typed column stores.
func sqlValue(t wire.ColumnType, v wire.Value) any {
	if v.Null {
		return nil
	}
	switch t {
	case wire.TypeInteger:
		return v.Int
	case wire.TypeBoolean:
		if v.Bool {
			return int64(1)
		}
		return int64(0)
	case wire.TypeFloat:
		return v.Float
	case wire.TypeBytes, wire.TypeCRDT:
		if v.Bytes == nil {
			return []byte{}
		}
		return v.Bytes
	}
	return v.Str
}

func (tx *writeTx) RowsByColumn(ctx context.Context, table, column string, value wire.Value, limit int) ([]store.Row, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	t, err := tx.table(table)
	if err != nil {
		return nil, err
	}
	ci, ok := t.t.ColumnIndex(column)
	if !ok || !t.t.Materialize() {
		return nil, fmt.Errorf("rows by column: %s.%s is not a materialized column", table, column)
	}
	rows, err := tx.c.query("SELECT "+t.scanCols+" FROM "+t.name+
		" WHERE _sync_partition=? AND "+quoteIdent(column)+"=? ORDER BY _sync_row_id LIMIT ?",
		tx.partition, sqlValue(t.t.Columns()[ci].Type, value), limit)
	if err != nil {
		return nil, fmt.Errorf("rows by column: %w", err)
	}
	defer rows.Close()
	var out []store.Row
	for rows.Next() {
		r := store.Row{Table: table}
		var scopes []byte
		if err := rows.Scan(&r.RowID, &r.ServerVersion, &scopes, &r.Payload, &r.ColumnVersions); err != nil {
			return nil, fmt.Errorf("rows by column: %w", err)
		}
		if r.Scopes, err = store.DecodeScopes(scopes); err != nil {
			return nil, err
		}
		out = append(out, r)
	}
	return out, rows.Err()
}
