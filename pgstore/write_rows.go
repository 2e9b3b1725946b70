package pgstore

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/syncgo/syncgo/store"
	"github.com/syncgo/syncgo/wire"
)

// ClearTombstone removes the row's tombstone (deferred).
func (t *writeTx) ClearTombstone(_ context.Context, table, rowID string) error {
	t.forgetTomb(rowKey{table, rowID})
	return t.write("clear tombstone", sqlClearTombstone, t.partition, table, rowID)
}

// UpsertRow writes the row with its typed columns and brings its scope
// index entries to its scopes, in one statement; deferred when the table
// declares no unique index (nothing to report as a constraint error).
func (t *writeTx) UpsertRow(ctx context.Context, w store.RowWrite) error {
	ts, err := t.table(w.Table)
	if err != nil {
		return err
	}
	args := []any{t.partition, w.RowID}
	if len(ts.typed) > 0 {
		vals := w.Values
		if vals == nil {
			if vals, err = ts.t.RowCodec().DecodeRow(w.Payload); err != nil {
				// Kept as text: the engine encoded this payload, so a
				// failure is the server's, not the client's request's.
				return fmt.Errorf("upsert row: decode payload: %v", err)
			}
		}
		typed, err := ts.typedArgs(vals)
		if err != nil {
			return fmt.Errorf("upsert row: %w", err)
		}
		args = append(args, typed...)
	}
	args = append(args, w.ServerVersion, string(store.EncodeScopes(w.Scopes)),
		nonNilBytes(w.Payload), nullIfEmpty(w.ColumnVersions))
	vars, values := scopeArrays(w.Scopes)
	args = append(args, ts.name, vars, values)
	t.forgetRow(rowKey{w.Table, w.RowID})
	if len(ts.constraints) == 0 {
		// No declared unique index to report: deferred, sent with the
		// next statement that has an answer.
		if err := t.write("upsert row", ts.writeRow, args...); err != nil {
			return err
		}
		t.b.pending[len(t.b.pending)-1].row = ts
		return nil
	}
	t.writes++
	br, err := t.send(ctx, func(b *pgx.Batch) { b.Queue(ts.writeRow, args...) })
	if err != nil {
		return fmt.Errorf("upsert row: %w", err)
	}
	_, err = br.Exec()
	if err = closeBatch(br, err); err != nil {
		return fmt.Errorf("upsert row: %w", ts.constraintError(err))
	}
	return nil
}

// DeleteRow removes the row and its scope index entries (deferred).
func (t *writeTx) DeleteRow(_ context.Context, table, rowID string) error {
	ts, err := t.table(table)
	if err != nil {
		return err
	}
	t.forgetRow(rowKey{table, rowID})
	return t.write("delete row", ts.dropRow, t.partition, rowID, ts.name)
}

// RowsByColumn reads up to limit rows whose materialized column equals
// value, in bytewise row-id order, on the transaction's connection. A NULL
// value equals nothing.
func (t *writeTx) RowsByColumn(ctx context.Context, table, column string, value wire.Value, limit int) ([]store.Row, error) {
	ts, err := t.table(table)
	if err != nil {
		return nil, err
	}
	i, ok := ts.t.ColumnIndex(column)
	if !ok || len(ts.typed) == 0 {
		return nil, fmt.Errorf("rows by column: %s.%s is not a materialized column", table, column)
	}
	arg := projectValue(ts.typed[i].Type, value)
	if arg == nil || limit <= 0 {
		return nil, nil
	}
	col := quoteIdent(column)
	match := col + " = $2"
	args := []any{t.partition, arg, limit}
	if ts.typed[i].Type == wire.TypeJSON {
		// The reference server stores a json column as a JSONB string of
		// the payload's text (json.go): that form matches the same text.
		match = "(" + col + " = $2::jsonb OR " + col + " = to_jsonb($4::text))"
		args = append(args, arg)
	}
	sql := "SELECT " + rowColumns + " FROM " + ts.quoted + " WHERE " + quoteIdent(colPartition) + " = $1 AND " +
		match + " ORDER BY " + quoteIdent(colRowID) + ` COLLATE "C" LIMIT $3`
	br, err := t.send(ctx, func(b *pgx.Batch) { b.Queue(sql, args...) })
	if err != nil {
		return nil, fmt.Errorf("rows by column: %w", err)
	}
	rows, err := br.Query()
	if err != nil {
		_ = br.Close()
		return nil, fmt.Errorf("rows by column: %w", err)
	}
	out, err := collectRows(rows, table)
	if err = closeBatch(br, err); err != nil {
		return nil, fmt.Errorf("rows by column: %w", err)
	}
	return out, nil
}

// PutPushResult records rec unless a record exists (first writer wins).
// When the batch read the key absent (ahead, or by PushResult) and did not
// write it since, it stores: the insert is deferred, without ON CONFLICT, so that
// the impossible conflict would fail the commit rather than pass unseen.
func (t *writeTx) PutPushResult(ctx context.Context, clientID, clientCommitID string, rec store.PushRecord) (bool, error) {
	body, err := store.EncodePushRecord(rec)
	if err != nil {
		return false, fmt.Errorf("put push result: %w", err)
	}
	key := journalKey{clientID, clientCommitID}
	delete(t.b.ahead.journal, key)
	if t.b.absent[key] {
		delete(t.b.absent, key)
		if err := t.usable(ctx); err != nil {
			return false, err
		}
		if n := len(t.b.pending); n > 0 && t.b.pending[n-1].owner == t &&
			t.b.pending[n-1].appended != nil && t.b.pending[n-1].appended.result == nil {
			// Right after the commit's append: one statement for both.
			d := &t.b.pending[n-1]
			d.sql = sqlAppendCommitResult
			d.args = append(d.args, clientID, clientCommitID, body)
			d.appended.result = &journalRecord{clientID, clientCommitID, body}
			t.writes++
			return true, nil
		}
		if err := t.write("put push result", sqlInsertPushResult, t.partition, clientID, clientCommitID, body); err != nil {
			return false, err
		}
		return true, nil
	}
	t.writes++
	br, err := t.send(ctx, func(b *pgx.Batch) {
		b.Queue(sqlPutPushResult, t.partition, clientID, clientCommitID, body)
	})
	if err != nil {
		return false, fmt.Errorf("put push result: %w", err)
	}
	var one int
	err = br.QueryRow().Scan(&one)
	stored := err == nil
	if errors.Is(err, pgx.ErrNoRows) {
		err = nil
	}
	if err = closeBatch(br, err); err != nil {
		return false, fmt.Errorf("put push result: %w", err)
	}
	return stored, nil
}

// scopeArrays returns the variables and values of stored scopes as two
// parallel arrays.
func scopeArrays(s wire.StoredScopes) (vars, values []string) {
	vars, values = make([]string, len(s)), make([]string, len(s))
	for i, e := range s {
		vars[i], values[i] = e.Key, e.Value
	}
	return vars, values
}
