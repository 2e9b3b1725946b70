package engine

import (
	"context"
	"errors"
	"fmt"
	"runtime/debug"

	"github.com/syncgo/syncgo/schema"
	"github.com/syncgo/syncgo/store"
	"github.com/syncgo/syncgo/syncerr"
	"github.com/syncgo/syncgo/validate"
	"github.com/syncgo/syncgo/wire"
)

// The static public messages of unexpected validator failures (§6.7): the
// host's error itself is logged, never sent or recorded.
const (
	msgValidatorFailed       = "write validator failed"
	msgCommitValidatorFailed = "whole-commit validator failed"
)

// hooksOn reports whether any write rule is configured: without one, the
// push path does no rule work at all.
func (e *Engine) hooksOn() bool {
	return len(e.cfg.Validators) > 0 || e.wantsEvidence()
}

// validateOp runs the table's row validator on an operation about to be
// staged and records the operation's evidence for the whole-commit
// validator (§6.7, §6.8). vals is the row that will persist (nil for a
// delete); stored the row before (nil for none).
func (a *applier) validateOp(ctx context.Context, i int, t *schema.CompiledTable, op wire.Op, rowID string,
	vals, stored []wire.Value, storedVersion, nextVersion int64) (*rejection, error) {
	e := a.r.e
	if !e.hooksOn() {
		return nil, nil
	}
	v := e.cfg.Validators[t.Name()]
	if v == nil && !e.wantsEvidence() {
		return nil, nil
	}
	o := validate.Operation{OpIndex: i, Op: op, Table: t.Name(), RowID: rowID, StoredServerVersion: storedVersion,
		NextServerVersion: nextVersion, Appended: a.appending}
	if vals != nil {
		o.Row = rowMap(t, vals)
	}
	if stored != nil {
		o.Stored = rowMap(t, stored)
	}
	if e.wantsEvidence() {
		a.evidence = append(a.evidence, o)
	}
	if v == nil {
		return nil, nil
	}
	rd := a.reader()
	w := &validate.Write{Operation: o, Origin: a.origin(), Tx: rd}
	err := callHook(func() error { return v(ctx, w) })
	rd.done = true
	if err == nil {
		// A read that failed fails the request even when the validator
		// dropped its error and accepted: it judged a state it could not
		// read.
		return nil, rd.failure()
	}
	return a.hookRejection(ctx, rd, i, err, msgValidatorFailed, false)
}

// noteAbsentDelete records a delete of an absent row: it stages nothing
// and runs no row validator, but is evidence for the whole-commit
// validator (§6.8).
func (a *applier) noteAbsentDelete(i int, table, rowID string) {
	if a.r.e.wantsEvidence() {
		a.evidence = append(a.evidence, validate.Operation{OpIndex: i, Op: wire.OpDelete, Table: table, RowID: rowID,
			Appended: a.appending})
	}
}

// validateCommit runs the whole-commit validator once every operation is
// staged and references are enforced (§6.8).
func (a *applier) validateCommit(ctx context.Context, nOps int) (*rejection, error) {
	cv := a.r.e.cfg.CommitValidator
	if cv == nil {
		return nil, nil
	}
	rd := a.reader()
	c := &validate.Commit{Origin: a.origin(), Operations: a.evidence, Tx: rd}
	err := callHook(func() error { return cv(ctx, c) })
	rd.done = true
	if err == nil {
		return nil, rd.failure()
	}
	rej, herr := a.hookRejection(ctx, rd, 0, err, msgCommitValidatorFailed, true)
	if rej != nil && (rej.result.OpIndex < 0 || int(rej.result.OpIndex) >= nOps) {
		a.r.e.cfg.Logger.ErrorContext(ctx, "whole-commit validator named an operation outside the commit",
			"opIndex", rej.result.OpIndex, "operations", nOps, "partition", a.r.auth.Partition)
		return opError(0, syncerr.CodeConstraintViolation, msgCommitValidatorFailed), nil
	}
	return rej, herr
}

// hookRejection turns a validator's error into the commit's terminating
// result: a deliberate rejection carries the host's code, message and
// details; anything else is sync.constraint_violation with a static
// message. A validator that failed after the storage failed under it (or
// whose request ended) fails the request instead: nothing is recorded and
// the client retries.
func (a *applier) hookRejection(ctx context.Context, rd *txReader, i int, err error, static string, commit bool) (*rejection, error) {
	if err := rd.failure(); err != nil {
		return nil, err
	}
	if cerr := ctx.Err(); cerr != nil {
		return nil, cerr
	}
	var rj *validate.Rejection
	if errors.As(err, &rj) && validate.CheckCode(rj.Code()) == nil {
		if k, ok := rj.OpIndex(); ok && commit {
			i = k
		}
		rej := &rejection{result: wire.OpResult{OpIndex: int32(i), Status: wire.OpError, Code: rj.Code(), Message: rj.Message()}}
		if d := rj.DetailsJSON(); d != "" {
			rej.details = &wire.DetailEntry{OpIndex: int32(i), DetailsJSON: d}
		}
		return rej, nil
	}
	a.r.e.cfg.Logger.ErrorContext(ctx, static, "err", err, "partition", a.r.auth.Partition, "opIndex", i)
	return opError(i, syncerr.CodeConstraintViolation, static), nil
}

// callHook runs a host callback; a panic is its error.
func callHook(f func() error) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("panic: %v\n%s", p, debug.Stack())
		}
	}()
	return f()
}

func (a *applier) origin() validate.Origin {
	return validate.Origin{ActorID: a.r.auth.ActorID, Partition: a.r.auth.Partition,
		ClientID: a.r.req.Header.ClientID, ClientCommitID: a.commitID}
}

func (a *applier) reader() *txReader {
	return &txReader{tx: a.tx, sc: a.r.e.cfg.Schema}
}

// txReader is the validate.Reader of one callback: authoritative reads on
// the push transaction (store.QueryTx). It remembers the first storage
// failure, which fails the request whatever the callback returns.
type txReader struct {
	tx       store.WriteTx
	sc       *schema.Compiled
	storeErr error
	done     bool
}

var errReaderDone = errors.New("validate: the reader was used after its validator returned")

// failure is the request's error when a read of the callback failed.
func (rd *txReader) failure() error {
	if rd.storeErr != nil {
		return fmt.Errorf("validator read: %w", rd.storeErr)
	}
	return nil
}

func (rd *txReader) query(ctx context.Context, q store.Query, agg store.Aggregate) (store.QueryResult, error) {
	if rd.done {
		return store.QueryResult{}, errReaderDone
	}
	qt, ok := rd.tx.(store.QueryTx)
	if !ok {
		return store.QueryResult{}, &store.Error{Code: store.CodeTransactionQueryRejected,
			Message: "the storage runs no queries inside a push transaction"}
	}
	res, err := qt.Query(ctx, q, agg)
	if err != nil && store.ErrorCode(err) != store.CodeInvalidQuery && rd.storeErr == nil {
		rd.storeErr = err
	}
	return res, err
}

// Row implements validate.Reader.
func (rd *txReader) Row(ctx context.Context, table, rowID string) (validate.StoredRow, bool, error) {
	if rd.done {
		return validate.StoredRow{}, false, errReaderDone
	}
	t, ok := rd.sc.Table(table)
	if !ok {
		return validate.StoredRow{}, false, fmt.Errorf("validate: unknown table %q", table)
	}
	r, err := rd.tx.Row(ctx, table, rowID)
	if errors.Is(err, store.ErrNotFound) {
		return validate.StoredRow{}, false, nil
	}
	if err != nil {
		if rd.storeErr == nil {
			rd.storeErr = err
		}
		return validate.StoredRow{}, false, err
	}
	sr, err := rd.decode(t, r)
	return sr, err == nil, err
}

func (rd *txReader) decode(t *schema.CompiledTable, r store.Row) (validate.StoredRow, error) {
	vals, err := t.RowCodec().DecodeRow(r.Payload)
	if err != nil {
		err = storedRowError(t.Name(), r.RowID, err)
		if rd.storeErr == nil {
			rd.storeErr = err
		}
		return validate.StoredRow{}, err
	}
	return validate.StoredRow{RowID: r.RowID, ServerVersion: r.ServerVersion, Values: rowMap(t, vals)}, nil
}

// Rows implements validate.Reader.
func (rd *txReader) Rows(ctx context.Context, q store.Query) ([]validate.StoredRow, error) {
	res, err := rd.query(ctx, q, store.Aggregate{Kind: store.AggRows})
	if err != nil {
		return nil, err
	}
	t, _ := rd.sc.Table(q.Table)
	out := make([]validate.StoredRow, 0, len(res.Rows))
	for _, r := range res.Rows {
		sr, err := rd.decode(t, r)
		if err != nil {
			return nil, err
		}
		out = append(out, sr)
	}
	return out, nil
}

// Count implements validate.Reader.
func (rd *txReader) Count(ctx context.Context, q store.Query) (int64, error) {
	res, err := rd.query(ctx, q, store.Aggregate{Kind: store.AggCount})
	return res.Count, err
}

// Exists implements validate.Reader.
func (rd *txReader) Exists(ctx context.Context, q store.Query) (bool, error) {
	res, err := rd.query(ctx, q, store.Aggregate{Kind: store.AggExists})
	return res.Exists, err
}

// SumInt implements validate.Reader.
func (rd *txReader) SumInt(ctx context.Context, q store.Query, column string) (int64, error) {
	if err := rd.sumType(q.Table, column, wire.TypeInteger); err != nil {
		return 0, err
	}
	res, err := rd.query(ctx, q, store.Aggregate{Kind: store.AggSum, Column: column})
	return res.Sum.Int, err
}

// SumFloat implements validate.Reader.
func (rd *txReader) SumFloat(ctx context.Context, q store.Query, column string) (float64, error) {
	if err := rd.sumType(q.Table, column, wire.TypeFloat); err != nil {
		return 0, err
	}
	res, err := rd.query(ctx, q, store.Aggregate{Kind: store.AggSum, Column: column})
	return res.Sum.Float, err
}

func (rd *txReader) sumType(table, column string, want wire.ColumnType) error {
	t, ok := rd.sc.Table(table)
	if !ok {
		return nil // the query refuses it
	}
	if i, ok := t.ColumnIndex(column); ok && t.Columns()[i].Type != want {
		return fmt.Errorf("validate: %s.%s is a %s column", table, column, t.Columns()[i].Type)
	}
	return nil
}

// rowMap keys a row's values by column name, as Go values (validate.Row).
func rowMap(t *schema.CompiledTable, vals []wire.Value) validate.Row {
	cols := t.Columns()
	m := make(validate.Row, len(cols))
	for i, c := range cols {
		if i < len(vals) {
			m[c.Name] = wire.GoValue(c.Type, vals[i])
		}
	}
	return m
}
