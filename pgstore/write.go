package pgstore

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/syncgo/syncgo/store"
)

// errTxDone is returned by a WriteTx used after its Write returned.
var errTxDone = errors.New("pgstore: write transaction already finished")

// rollbackTimeout bounds the ROLLBACK of a failed Write whose context is
// already done.
const rollbackTimeout = 5 * time.Second

// deferred is a statement whose answer nobody waits for: it is sent with
// the next statement that has one, in the same pipelined batch.
type deferred struct {
	what string
	sql  string
	args []any
}

// writeTx is the store.WriteTx of one Write: one connection, one
// transaction.
type writeTx struct {
	s         *Store
	conn      *pgxpool.Conn
	partition string
	st        *schemaState // nil before EnsureSchema

	pending []deferred
	sends   int // batches sent so far
	depth   int // nesting of Candidate
	// appended counts the commits appended and not undone by a Candidate.
	appended int64
	done     bool
	// committed reports that a database transaction committed.
	committed bool
}

// Write runs fn in one transaction under the partition's row lock (see the
// package documentation). BEGIN and the lock are deferred: they travel
// with fn's first statement.
func (s *Store) Write(ctx context.Context, partition string, fn func(ctx context.Context, tx store.WriteTx) error) (err error) {
	if err := s.checkWrite(); err != nil {
		return err
	}
	defer func() {
		if err != nil {
			s.writeErrors.Add(1)
			err = storageFull(err)
		}
	}()
	conn, err := s.pool.Acquire(ctx)
	if err != nil {
		return fmt.Errorf("write: acquire connection: %w", err)
	}
	defer conn.Release()
	tx := &writeTx{s: s, conn: conn, partition: partition, st: s.schema.Load()}
	tx.defer_("begin", "BEGIN")
	tx.defer_("lock partition", sqlLockPartition, partition)
	defer tx.rollback(ctx) // no-op after a commit
	if err := fn(ctx, tx); err != nil {
		return err
	}
	if err := tx.commit(ctx); err != nil {
		return fmt.Errorf("write: commit: %w", err)
	}
	s.writes.Add(1)
	if tx.committed {
		s.batches.Add(1)
	}
	s.commits.Add(tx.appended)
	return nil
}

// defer_ queues a statement without an answer.
func (t *writeTx) defer_(what, sql string, args ...any) {
	t.pending = append(t.pending, deferred{what: what, sql: sql, args: args})
}

// send sends the deferred statements and then those that queue adds, in
// one batch (one round trip), and returns the results positioned at the
// first statement queue added. The caller must Close them.
func (t *writeTx) send(ctx context.Context, queue func(b *pgx.Batch)) (pgx.BatchResults, error) {
	if t.done {
		return nil, errTxDone
	}
	b := &pgx.Batch{}
	pending := t.pending
	t.pending = nil
	for _, d := range pending {
		b.Queue(d.sql, d.args...)
	}
	queue(b)
	t.sends++
	br := t.conn.SendBatch(ctx, b)
	for _, d := range pending {
		if _, err := br.Exec(); err != nil {
			_ = br.Close()
			return nil, fmt.Errorf("%s: %w", d.what, err)
		}
	}
	return br, nil
}

// closeBatch closes br and returns err, or the error of closing.
func closeBatch(br pgx.BatchResults, err error) error {
	cerr := br.Close()
	if err != nil {
		return err
	}
	return cerr
}

// commit sends what is deferred and COMMIT. A transaction that failed
// earlier (and whose error fn swallowed) answers COMMIT with ROLLBACK:
// that is an error too.
func (t *writeTx) commit(ctx context.Context) error {
	if t.sends == 0 && len(t.pending) == 2 {
		// fn did nothing: BEGIN and the lock were never sent, and need not be.
		t.done, t.pending = true, nil
		return nil
	}
	br, err := t.send(ctx, func(b *pgx.Batch) { b.Queue("COMMIT") })
	if err != nil {
		return err
	}
	tag, err := br.Exec()
	if err = closeBatch(br, err); err != nil {
		return err
	}
	t.done = true
	if tag.String() != "COMMIT" {
		return errors.New("the transaction failed earlier and was rolled back")
	}
	t.committed = true
	return nil
}

// rollback ends a transaction that did not commit. When it fails, the
// connection goes back to the pool mid-transaction and the pool closes it.
func (t *writeTx) rollback(ctx context.Context) {
	if t.done {
		return
	}
	t.done = true
	t.pending = nil
	if t.sends == 0 {
		return // BEGIN was never sent
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), rollbackTimeout)
	defer cancel()
	if _, err := t.conn.Exec(ctx, "ROLLBACK"); err != nil {
		t.s.log.WarnContext(ctx, "pgstore: rollback failed; the connection is discarded", "err", err)
	}
}

// Partition returns the partition the transaction writes to.
func (t *writeTx) Partition() string { return t.partition }

// Candidate runs fn inside a savepoint. The SAVEPOINT (and on success the
// RELEASE) is deferred; when fn sent nothing, its deferred statements are
// kept (success) or dropped (failure) without any savepoint at all.
func (t *writeTx) Candidate(ctx context.Context, fn func(ctx context.Context) error) error {
	if t.done {
		return errTxDone
	}
	t.depth++
	name := "syncgo_candidate_" + strconv.Itoa(t.depth)
	mark, sends, appended := len(t.pending), t.sends, t.appended
	t.defer_("savepoint", "SAVEPOINT "+name)
	err := fn(ctx)
	t.depth--
	if t.done {
		return errors.Join(err, errTxDone)
	}
	unsent := t.sends == sends
	switch {
	case err == nil && unsent:
		t.pending = append(t.pending[:mark], t.pending[mark+1:]...)
	case err == nil:
		t.defer_("release savepoint", "RELEASE SAVEPOINT "+name)
	case unsent:
		t.pending = t.pending[:mark]
		t.appended = appended
	default:
		// The transaction may be aborted by fn's failure. Roll back now,
		// not deferred: pgx prepares a batch's new statements before
		// sending it, which an aborted transaction refuses. What fn
		// deferred after its last send is inside the savepoint: dropped.
		t.pending = nil
		t.appended = appended
		t.sends++
		sql := "ROLLBACK TO SAVEPOINT " + name + "; RELEASE SAVEPOINT " + name
		if _, rerr := t.conn.Exec(ctx, sql); rerr != nil {
			return errors.Join(err, fmt.Errorf("rollback to savepoint: %w", rerr))
		}
	}
	return err
}

// table resolves a table of the schema ensured when the Write began.
func (t *writeTx) table(name string) (*tableSQL, error) {
	if t.st == nil {
		return nil, store.ErrNoSchema
	}
	return t.st.table(name)
}
