package sspclient

import (
	"errors"
	"fmt"
	"strconv"

	"github.com/syncgo/syncgo/wire"
)

// Operation is one operation of an outbox commit.
type Operation struct {
	Table       string
	RowID       string
	Op          wire.Op
	BaseVersion *int64
	// Values are the columns the upsert writes (every column at wire
	// versions 1 and 2, which push full rows).
	Values wire.SparseRow
	// Payload is the encoded row: a sparse row at wire version 3, a full
	// row before; nil for a delete.
	Payload []byte
}

// Commit is an outbox commit: the idempotency key and its operations
// (§7.1). It is immutable once queued.
type Commit struct {
	ID         string
	Operations []Operation
}

// Outcome is the final outcome of an outbox commit: its PUSH_RESULT, or a
// local drop.
type Outcome struct {
	CommitID string
	// Status is applied, cached or rejected; zero for a local drop.
	Status    wire.PushStatus
	CommitSeq int64
	Results   []wire.OpResult
	Details   []wire.DetailEntry
	// Dropped is the reason of a local drop (a commit writing into a
	// revoked scope, §3.3), or empty.
	Dropped string
	// Commit is the commit as it was queued.
	Commit *Commit
}

// Conflict returns the conflict record of a rejected commit, if its
// terminating result is a conflict.
func (o Outcome) Conflict() (wire.OpResult, bool) {
	for _, r := range o.Results {
		if r.Status == wire.OpConflict {
			return r, true
		}
	}
	return wire.OpResult{}, false
}

// ErrorCode returns the code of the terminating error record of a
// rejected commit, or "".
func (o Outcome) ErrorCode() string {
	for _, r := range o.Results {
		if r.Status != wire.OpApplied {
			return r.Code
		}
	}
	return ""
}

// OpOption adjusts one operation.
type OpOption func(c *Client, op *Operation)

// BaseVersion sets the operation's optimistic-concurrency token (§6.2).
func BaseVersion(v int64) OpOption {
	return func(_ *Client, op *Operation) { op.BaseVersion = &v }
}

// Versioned sets the base version to the server version of the local row,
// when there is one.
func Versioned() OpOption {
	return func(c *Client, op *Operation) {
		if r, ok := c.rows[op.Table][op.RowID]; ok {
			v := r.Version
			op.BaseVersion = &v
		}
	}
}

// Tx collects the operations of one commit; see Client.Mutate.
type Tx struct {
	c   *Client
	ops []Operation
}

// Upsert adds an upsert of values: a map of column name to Go value (see
// [WireValue]) or a full []wire.Value row. The primary key must be among
// them. At wire versions 1 and 2 the absent columns are taken from the
// local row (NULL without one), since those versions push full rows.
func (tx *Tx) Upsert(table string, values any, opts ...OpOption) error {
	t, ok := tx.c.schema.Table(table)
	if !ok {
		return fmt.Errorf("sspclient: unknown table %q", table)
	}
	row, err := sparseValues(t, values)
	if err != nil {
		return fmt.Errorf("sspclient: %w", err)
	}
	id, err := rowID(t, row)
	if err != nil {
		return fmt.Errorf("sspclient: %w", err)
	}
	op := Operation{Table: table, RowID: id, Op: wire.OpUpsert}
	for _, o := range opts {
		o(tx.c, &op)
	}
	codec := t.RowCodec()
	if tx.c.opts.WireVersion >= wire.Version3 {
		op.Payload, err = codec.AppendSparse(nil, row)
	} else {
		local, hasLocal := tx.c.rows[table][id]
		full := make([]wire.Value, len(row.Values))
		for i := range full {
			switch {
			case row.Present[i]:
				full[i] = row.Values[i]
			case hasLocal:
				full[i] = local.Values[i]
			default:
				full[i] = wire.Value{Null: true}
			}
			row.Present[i] = true
		}
		row.Values = full
		op.Payload, err = codec.AppendRow(nil, full)
	}
	if err != nil {
		return fmt.Errorf("sspclient: table %s row %s: %w", table, id, err)
	}
	op.Values = row
	tx.ops = append(tx.ops, op)
	return nil
}

// Delete adds a delete of a row.
func (tx *Tx) Delete(table, rowID string, opts ...OpOption) error {
	if _, ok := tx.c.schema.Table(table); !ok {
		return fmt.Errorf("sspclient: unknown table %q", table)
	}
	op := Operation{Table: table, RowID: rowID, Op: wire.OpDelete}
	for _, o := range opts {
		o(tx.c, &op)
	}
	tx.ops = append(tx.ops, op)
	return nil
}

// Mutate queues one commit with the operations fn adds, and returns its
// clientCommitId. Nothing is queued when fn fails or adds nothing. fn runs
// under the client's lock and must not call other Client methods.
func (c *Client) Mutate(fn func(tx *Tx) error) (string, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	tx := &Tx{c: c}
	if err := fn(tx); err != nil {
		return "", err
	}
	if len(tx.ops) == 0 {
		return "", errors.New("sspclient: a commit needs at least one operation")
	}
	c.commitN++
	id := c.idPrefix + "-" + strconv.FormatUint(c.commitN, 10)
	c.outbox = append(c.outbox, &Commit{ID: id, Operations: tx.ops})
	return id, nil
}

// Upsert queues a commit of one upsert (see Tx.Upsert).
func (c *Client) Upsert(table string, values any, opts ...OpOption) (string, error) {
	return c.Mutate(func(tx *Tx) error { return tx.Upsert(table, values, opts...) })
}

// Delete queues a commit of one delete.
func (c *Client) Delete(table, rowID string) (string, error) {
	return c.Mutate(func(tx *Tx) error { return tx.Delete(table, rowID) })
}

// settle records the outcome of a pushed commit and takes it out of the
// outbox, unless it is a retryable idempotency cache miss (§6.3). The
// caller holds c.mu.
func (c *Client) settle(cm *Commit, pr *wire.PushResult) Outcome {
	out := Outcome{CommitID: pr.ClientCommitID, Status: pr.Status, CommitSeq: pr.CommitSeq,
		Results: pr.Results, Commit: cm}
	if pr.Status == wire.PushRejected && len(pr.Results) == 1 && pr.Results[0].Retryable {
		return out // stays queued: the next round retries it
	}
	for i, q := range c.outbox {
		if q == cm {
			c.outbox = append(c.outbox[:i:i], c.outbox[i+1:]...)
			break
		}
	}
	c.outcomes = append(c.outcomes, out)
	return out
}

// dropRevoked drops, whole, the queued commits with an upsert that lands
// in revoked scopes of a table (§3.3). The caller holds c.mu.
func (c *Client) dropRevoked(table string, scopes wire.ScopeMap) {
	t, _ := c.schema.Table(table)
	kept := c.outbox[:0:0]
	for _, cm := range c.outbox {
		drop := false
		for _, op := range cm.Operations {
			if op.Op == wire.OpUpsert && op.Table == table && sparseMatches(t, op.Values, scopes) {
				drop = true
				break
			}
		}
		if drop {
			c.outcomes = append(c.outcomes, Outcome{CommitID: cm.ID, Dropped: "sync.scope_revoked", Commit: cm})
			continue
		}
		kept = append(kept, cm)
	}
	c.outbox = kept
}
