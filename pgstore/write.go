package pgstore

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/syncgo/syncgo/store"
)

// errTxDone is returned by a WriteTx used after its Write returned.
var errTxDone = errors.New("pgstore: write transaction already finished")

// rollbackTimeout bounds the ROLLBACK of a failed transaction whose
// context is already done.
const rollbackTimeout = 5 * time.Second

// The savepoint of each commit of a batch of several. One name serves
// them all: a commit's savepoint is released (or rolled back and
// released) before the next one begins.
const (
	sqlSavepointCommitName = "syncgo_commit"
	sqlSavepointCommit     = "SAVEPOINT " + sqlSavepointCommitName
	sqlReleaseCommit       = "RELEASE SAVEPOINT " + sqlSavepointCommitName
)

// deferred is a statement whose answer nobody waits for: it is sent with
// the next statement that has one, in the same pipelined batch.
type deferred struct {
	what string
	sql  string
	args []any
	// ctl marks the statements of the transaction's own structure (BEGIN,
	// the partition lock, savepoints): a failure of one ends the batch.
	ctl bool
	// scan, when set, reads the statement's answer (one row); rows reads
	// an answer of several.
	scan func(pgx.Row) error
	rows func(pgx.Rows) error
	// owner is the commit that queued it (nil: the batch's own).
	owner *writeTx
	// appended is what an append in one statement (sqlAppendCommit or,
	// once the commit's push result joined it, sqlAppendCommitResult)
	// writes: the push result's join and the coalesced appends read it.
	appended *appendedCommit
	// row is the table of a deferred row upsert (its args are writeRow's):
	// the coalesced tail joins the upserts of a table into writeRows.
	row *tableSQL
}

// batch is one database transaction on one pooled connection: the
// commits of a group (group.go), or one operation of its own (a prune, a
// checkpoint activation). Its statements run with its own context.
type batch struct {
	s         *Store
	conn      *pgxpool.Conn
	ctx       context.Context
	partition string
	// multi: the batch carries several commits, each in the savepoint
	// syncgo_commit.
	multi bool

	pending []deferred
	sends   int // round trips so far
	// rowsStatements: the writeRows statements of the coalesced tail.
	rowsStatements int
	// seq is the partition's newest commit sequence as the transaction
	// sees it: read by the partition lock (seqKnown), then advanced by
	// each append; written back to sync_partitions once, at COMMIT.
	seq, lockedSeq int64
	seqKnown       bool
	// gate is the serve gate read in this transaction (nil before).
	gate *cachedGate
	// ahead is what the batch read ahead for its commits (readahead.go);
	// absent are the journal keys read absent and not written since.
	ahead  readAhead
	absent map[journalKey]bool
	// aheadPending: the reads ahead are queued and not sent yet.
	aheadPending bool
	// commits are the commits run so far, in order.
	commits []*writeTx

	// broken is the error that ended the transaction: every commit of the
	// batch fails with it.
	broken    error
	done      bool
	committed bool
	// commitSent: the COMMIT went out in a round trip; commitNotRun: the
	// server's answer to a statement before it was that it ended the
	// session, so the COMMIT never ran (group.go, runLive).
	commitSent, commitNotRun bool
}

// cachedGate is a serve gate read for a running version.
type cachedGate struct {
	running int32
	gate    store.ServeGate
}

// newBatch starts a batch on conn: BEGIN is deferred.
func newBatch(s *Store, conn *pgxpool.Conn, ctx context.Context, partition string, multi bool) *batch {
	b := &batch{s: s, conn: conn, ctx: ctx, partition: partition, multi: multi, absent: map[journalKey]bool{}}
	b.deferCtl("begin", "BEGIN")
	return b
}

// lockPartition defers the partition lock, the write boundary, and
// records the newest sequence it reads.
func (b *batch) lockPartition() {
	b.pending = append(b.pending, deferred{what: "lock partition", sql: sqlLockPartition, args: []any{b.partition}, ctl: true,
		scan: func(r pgx.Row) error {
			var horizon int64
			if err := r.Scan(&b.seq, &horizon); err != nil {
				return err
			}
			b.lockedSeq, b.seqKnown = b.seq, true
			return nil
		}})
}

// deferCtl queues a statement of the transaction's structure.
func (b *batch) deferCtl(what, sql string) {
	b.pending = append(b.pending, deferred{what: what, sql: sql, ctl: true})
}

// writesPending reports whether a statement other than the structure's
// waits to be sent.
func (b *batch) writesPending(from int) bool {
	for _, d := range b.pending[from:] {
		if !d.ctl {
			return true
		}
	}
	return false
}

// send sends the deferred statements and then those that queue adds, in
// one batch (one round trip), and returns the results positioned at the
// first statement queue added. The caller must Close them. ctx is the
// caller's: it is checked first, the statements run with the batch's. cur
// is the commit that sends (nil: the batch itself).
//
// A deferred write of an earlier commit of the batch that fails here (the
// writes of a commit travel with the next commit's first round trip) is
// that commit's failure, not cur's: its savepoint is rolled back, it is
// answered with the error, and the statements of the commits after it are
// sent again.
func (b *batch) send(ctx context.Context, cur *writeTx, queue func(bb *pgx.Batch)) (pgx.BatchResults, error) {
	if b.done {
		return nil, errTxDone
	}
	if b.broken != nil {
		return nil, b.broken
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	bb := &pgx.Batch{}
	pending := b.pending
	b.pending = nil
	for _, d := range pending {
		bb.Queue(d.sql, d.args...)
	}
	queue(bb)
	b.sends++
	b.aheadPending = false
	b.s.roundTrips.Add(1)
	br := b.conn.SendBatch(b.ctx, bb)
	for i, d := range pending {
		var err error
		switch {
		case d.scan != nil:
			err = d.scan(br.QueryRow())
		case d.rows != nil:
			var rows pgx.Rows
			if rows, err = br.Query(); err == nil {
				err = d.rows(rows)
				rows.Close()
				if err == nil {
					err = rows.Err()
				}
			}
		default:
			_, err = br.Exec()
		}
		if err == nil {
			continue
		}
		_ = br.Close()
		err = fmt.Errorf("%s: %w", d.what, fenceError(err))
		if d.ctl {
			b.broken = err
			return nil, err
		}
		if late := d.owner; late != nil && late != cur && late.done && b.multi {
			return b.lateFailure(ctx, cur, late, err, pending[i+1:], queue)
		}
		return nil, err
	}
	return br, nil
}

// lateFailure undoes the commit late, whose deferred write failed with
// err in a round trip of a later commit (or of the COMMIT), and sends that
// round trip again without it: rest are the deferred statements that
// followed the failed one. The commits after late that appended took
// their sequences after late's: they fail too (cur with the error of its
// call), so that the sequence stays dense.
func (b *batch) lateFailure(ctx context.Context, cur, late *writeTx, err error, rest []deferred, queue func(bb *pgx.Batch)) (pgx.BatchResults, error) {
	failed := map[*writeTx]bool{}
	for _, c := range b.commits[late.index:] {
		if c == late || c.appended > 0 {
			failed[c] = true
			b.seq -= c.appended
			c.appended = 0
			c.late = err
			if c != late {
				c.late = fmt.Errorf("a commit before it in the transaction failed: %w", err)
			}
		}
	}
	var again []deferred
	for _, d := range rest {
		if !failed[d.owner] {
			again = append(again, d)
		}
	}
	// late's savepoint is the innermost: its RELEASE, and the next
	// commits' statements, came after the failed statement.
	if rerr := b.rollbackTo(sqlSavepointCommitName, true); rerr != nil {
		return nil, errors.Join(err, rerr)
	}
	b.pending = again
	if cur != nil && failed[cur] {
		cur.dead, cur.done = true, true
		return nil, cur.late
	}
	return b.send(ctx, cur, queue)
}

// flush sends the deferred statements in one round trip.
func (b *batch) flush(ctx context.Context, cur *writeTx) error {
	if len(b.pending) == 0 {
		return nil
	}
	br, err := b.send(ctx, cur, func(*pgx.Batch) {})
	if err != nil {
		return err
	}
	return br.Close()
}

// closeBatch closes br and returns err, or the error of closing.
func closeBatch(br pgx.BatchResults, err error) error {
	cerr := br.Close()
	if err != nil {
		return err
	}
	return cerr
}

// aborted reports whether the transaction is in the failed state: a
// statement failed and no rollback to a savepoint undid it yet.
func (b *batch) aborted() bool { return b.conn.Conn().PgConn().TxStatus() == 'E' }

// rollbackTo rolls back to the savepoint (and releases it when release is
// set), at once: pgx prepares a batch's new statements before sending it,
// which an aborted transaction refuses. Failing, it breaks the batch.
func (b *batch) rollbackTo(name string, release bool) error {
	b.pending = nil
	sql := "ROLLBACK TO SAVEPOINT " + name
	if release {
		sql += "; RELEASE SAVEPOINT " + name
	}
	b.sends++
	b.s.roundTrips.Add(1)
	if _, err := b.conn.Exec(b.ctx, sql); err != nil {
		b.broken = fmt.Errorf("rollback to savepoint: %w", err)
		return b.broken
	}
	return nil
}

// endCommit ends a successful commit of a batch of several: the release
// of its savepoint is deferred, and so are its writes not sent yet, which
// travel with the next commit's first round trip (a failure of one is
// then this commit's: see send).
func (b *batch) endCommit(tx *writeTx) error {
	if b.aborted() {
		return errors.New("the transaction failed earlier")
	}
	b.pending = append(b.pending, deferred{what: "release savepoint", sql: sqlReleaseCommit, ctl: true, owner: tx})
	return nil
}

// commit sends what is deferred, the sequence written back, and COMMIT. A
// transaction that failed earlier answers COMMIT with ROLLBACK: that is an
// error too. A batch that sent nothing and has nothing to write commits
// nothing.
func (b *batch) commit() error {
	if b.sends == 0 && !b.writesPending(0) {
		b.done, b.pending = true, nil
		return nil
	}
	if b.aborted() {
		return errors.New("the transaction failed earlier")
	}
	// The commits' appends as one statement when they allow it
	// (coalesce.go); originals are the statements it replaced.
	var originals []deferred
	if tail := b.coalescedTail(); tail != nil {
		originals, b.pending = b.pending, tail
		for _, d := range tail {
			if d.sql != "" && d.what == whatUpsertRows {
				b.rowsStatements++
			}
		}
	}
	var appended bool
	queue := func(bb *pgx.Batch) {
		// Queued again, with the sequence then, if a commit's late
		// failure undid its appends.
		if appended = b.seq != b.lockedSeq; appended {
			bb.Queue(sqlSetMaxCommitSeq, b.partition, b.seq)
		}
		bb.Queue("COMMIT")
		b.commitSent = true
		if appended {
			bb.Queue(sqlNotifyCommit, b.partition, b.s.dbSchema, b.seq)
		}
	}
	br, err := b.send(b.ctx, nil, queue)
	if err != nil && originals != nil && b.broken == nil {
		// A statement of the coalesced tail failed (the COMMIT after it
		// was not run): undo the tail and send the commits one by one,
		// which tells the failing commit from the others.
		b.s.tailFallbacks.Add(1)
		if rerr := b.rollbackTo(sqlSavepointTailName, true); rerr != nil {
			return errors.Join(err, rerr)
		}
		b.pending, originals = originals, nil
		br, err = b.send(b.ctx, nil, queue)
	}
	if err != nil {
		b.commitNotRun = serverEnded(err)
		return err
	}
	if originals != nil {
		b.s.coalesced.Add(1)
		b.s.coalescedRows.Add(int64(b.rowsStatements))
	}
	if appended {
		if _, err := br.Exec(); err != nil {
			_ = br.Close()
			b.commitNotRun = serverEnded(err)
			return fmt.Errorf("write back sequence: %w", err)
		}
	}
	tag, err := br.Exec()
	if err != nil {
		_ = br.Close()
		return err
	}
	b.done = true
	if tag.String() != "COMMIT" {
		_ = br.Close()
		return errors.New("the transaction failed earlier and was rolled back")
	}
	b.committed = true
	if appended {
		// Committed whatever the notification comes to.
		_, err = br.Exec()
	}
	if err = closeBatch(br, err); err != nil {
		b.s.log.WarnContext(b.ctx, "pgstore: commit notification failed", "partition", b.partition, "seq", b.seq, "err", err)
		if appended {
			b.s.renotifier.add(b.partition, b.seq)
		}
	}
	return nil
}

// renotifyAttempts and renotifyTimeout bound the announcing again of one
// commit.
const (
	renotifyAttempts = 3
	renotifyTimeout  = 3 * time.Second
)

// renotifier announces committed sequences again, on connections of the
// pool, after the notification that followed their COMMIT failed (the
// writer's connection was lost right after the COMMIT, as
// pg_terminate_backend or a pooler's restart does to it while the
// listeners' direct connections stay up). Without it no other instance
// would hear of the commit before the partition's next one, and their
// sockets would miss its delta until then. It works in the background, so
// that the Write, whose commit stands whatever comes of the notification,
// answers at once: one goroutine at most, started when a sequence is
// queued and gone when none waits, holding the newest failed sequence of
// each partition (a notification announces the partition's log up to its
// sequence, so a newer one covers an older). Each is tried a few times,
// within renotifyTimeout. Close stops it.
type renotifier struct {
	s      *Store
	ctx    context.Context
	cancel context.CancelFunc

	mu      sync.Mutex
	pending map[string]int64 // partition -> newest sequence to announce
	running bool
	wg      sync.WaitGroup
}

// newRenotifier returns the store's renotifier, idle.
func newRenotifier(s *Store) *renotifier {
	ctx, cancel := context.WithCancel(context.Background())
	return &renotifier{s: s, ctx: ctx, cancel: cancel, pending: map[string]int64{}}
}

// add queues the announcing again of partition's sequence seq.
func (r *renotifier) add(partition string, seq int64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.ctx.Err() != nil {
		return
	}
	r.pending[partition] = max(r.pending[partition], seq)
	if !r.running {
		r.running = true
		r.wg.Add(1)
		go r.run()
	}
}

// run announces what is pending until nothing is.
func (r *renotifier) run() {
	defer r.wg.Done()
	for {
		r.mu.Lock()
		var partition string
		var seq int64
		found := false
		for p, q := range r.pending {
			partition, seq, found = p, q, true
			break
		}
		if !found || r.ctx.Err() != nil {
			r.running = false
			r.mu.Unlock()
			return
		}
		delete(r.pending, partition)
		r.mu.Unlock()
		r.s.renotify(r.ctx, partition, seq)
	}
}

// close stops the renotifier and waits for it.
func (r *renotifier) close() {
	r.mu.Lock()
	r.cancel()
	r.mu.Unlock()
	r.wg.Wait()
}

// renotify announces partition's sequence seq again: a few times, within
// s.renotifyTimeout.
func (s *Store) renotify(ctx context.Context, partition string, seq int64) {
	ctx, cancel := context.WithTimeout(ctx, s.renotifyTimeout)
	defer cancel()
	var err error
	for attempt := range renotifyAttempts {
		if attempt > 0 {
			select {
			case <-ctx.Done():
			case <-time.After(time.Duration(attempt) * 100 * time.Millisecond):
			}
		}
		if _, err = s.pool.Exec(ctx, sqlNotifyCommit, partition, s.dbSchema, seq); err == nil {
			return
		}
	}
	s.log.ErrorContext(ctx, "pgstore: commit notification lost: other instances hear of the commit with the partition's next one",
		"partition", partition, "seq", seq, "err", err)
}

// rollback ends a transaction that did not commit. When it fails, the
// connection goes back to the pool mid-transaction and the pool closes it.
func (b *batch) rollback() {
	if b.done {
		return
	}
	b.done = true
	b.pending = nil
	if b.sends == 0 {
		return // BEGIN was never sent
	}
	b.s.roundTrips.Add(1)
	ctx, cancel := context.WithTimeout(context.WithoutCancel(b.ctx), rollbackTimeout)
	defer cancel()
	if _, err := b.conn.Exec(ctx, "ROLLBACK"); err != nil {
		b.s.log.WarnContext(ctx, "pgstore: rollback failed; the connection is discarded", "err", err)
	}
}

// writeTx is the store.WriteTx (and store.BarrierTx) of one Write: one
// commit's view of its batch. Its statements run on the batch's
// connection, inside the commit's savepoint when the batch carries
// several; a read of the commit runs there too (send; Query in query.go).
type writeTx struct {
	b         *batch
	partition string
	st        *schemaState // nil before EnsureSchema
	// outer: the commit runs in the savepoint syncgo_commit.
	outer bool
	depth int // nesting of Candidate
	// writes counts the writing statements the commit queued.
	writes int
	// appended counts the commits appended and not undone by a Candidate.
	appended int64
	// index is the commit's place in its batch.
	index int
	// reads are the rows and tombstones the commit read (a tombstone is
	// read with each row), until a write to the same key.
	reads readAhead
	// late is the failure of a write of the commit that was sent after
	// its function returned, or of an earlier commit that took it along
	// (see batch.lateFailure); dead: then none of its statements ran.
	late error
	dead bool
	done bool
}

// s is the store.
func (t *writeTx) s() *Store { return t.b.s }

// send is batch.send for a call of the commit.
func (t *writeTx) send(ctx context.Context, queue func(bb *pgx.Batch)) (pgx.BatchResults, error) {
	if t.done {
		return nil, errTxDone
	}
	return t.b.send(ctx, t, queue)
}

// write queues a writing statement of the commit.
func (t *writeTx) write(what, sql string, args ...any) error {
	if t.done {
		return errTxDone
	}
	t.writes++
	t.b.pending = append(t.b.pending, deferred{what: what, sql: sql, args: args, owner: t})
	return nil
}

// Partition returns the partition the transaction writes to.
func (t *writeTx) Partition() string { return t.partition }

// Candidate runs fn inside a savepoint. The SAVEPOINT (and on success the
// RELEASE) is deferred; when fn sent nothing, its deferred statements are
// kept (success) or dropped (failure) without any savepoint at all. The
// first Candidate of a commit of a batch of several that wrote nothing
// yet uses the commit's own savepoint. Writes of fn still deferred when it
// returns are sent later: a failure of one then fails the Write.
func (t *writeTx) Candidate(ctx context.Context, fn func(ctx context.Context) error) error {
	if t.done {
		return errTxDone
	}
	b := t.b
	reuse := t.depth == 0 && t.outer && t.writes == 0
	t.depth++
	name := "syncgo_candidate_" + strconv.Itoa(t.depth)
	mark, sends, appended, writes := len(b.pending), b.sends, t.appended, t.writes
	if !reuse {
		b.pending = append(b.pending, deferred{what: "savepoint", sql: "SAVEPOINT " + name, ctl: true, owner: t})
	}
	err := fn(ctx)
	t.depth--
	if t.done {
		return errors.Join(err, errTxDone)
	}
	if err == nil && b.aborted() {
		err = errors.New("a statement of the candidate failed")
	}
	if err == nil {
		switch {
		case reuse:
		case b.sends == sends && !b.writesPending(mark):
			// Nothing inside reached the database: no savepoint at all.
			b.pending = append(b.pending[:mark], b.pending[mark+1:]...)
		default:
			b.pending = append(b.pending, deferred{what: "release savepoint", sql: "RELEASE SAVEPOINT " + name, ctl: true, owner: t})
		}
		return nil
	}
	// The appends fn made are undone: their sequences are free again.
	b.seq -= t.appended - appended
	t.appended, t.writes = appended, writes
	t.reads = readAhead{} // what fn read may have seen its writes
	if b.sends == sends {
		b.pending = b.pending[:mark]
		return err
	}
	// The transaction may be aborted by fn's failure; what fn deferred
	// after its last send is inside the savepoint: dropped.
	target, release := name, true
	if reuse {
		target, release = sqlSavepointCommitName, false
	}
	if rerr := b.rollbackTo(target, release); rerr != nil {
		return errors.Join(err, rerr)
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
