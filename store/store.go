package store

import (
	"context"

	"github.com/syncgo/syncgo/schema"
	"github.com/syncgo/syncgo/wire"
)

// Store is a storage driver. All methods are safe for concurrent use.
type Store interface {
	// EnsureSchema creates the app tables of s (or checks them) and
	// records the schema marker. It must be called before any other call
	// that touches rows. A database whose marker is newer than s fails
	// with ErrSchemaNewer.
	EnsureSchema(ctx context.Context, s *schema.Compiled) error
	// Marker returns the database's schema marker; ErrNotFound when the
	// database has none yet.
	Marker(ctx context.Context) (Marker, error)

	// TouchPartition records an authenticated request for the partition,
	// creating its registry entry with newEpoch if it has none, and
	// returns its state.
	TouchPartition(ctx context.Context, partition string, nowMs int64, newEpoch string) (Partition, error)
	// Partition returns the partition's state; ErrNotFound if unknown.
	Partition(ctx context.Context, partition string) (Partition, error)
	// RotateLogEpoch gives the partition a new log epoch after its log was
	// rewound (a restore), requires epochs from then on, and forgets its
	// client records.
	RotateLogEpoch(ctx context.Context, partition, newEpoch string, nowMs int64) error

	// Write runs fn under the partition's write boundary, in a transaction
	// that commits when fn returns nil and rolls back otherwise. It
	// returns fn's error, or the commit's. Drivers may run the functions
	// of concurrent Write calls in one database transaction (group
	// commit); each still commits or rolls back on its own, and Write
	// returns only once its writes are durable. A driver may run fn more
	// than once, each time in a new transaction from the start, when the
	// database connection was lost before the transaction committed (and,
	// for a WriteReadAhead with its journal key, when the COMMIT's outcome
	// is unknown): fn must read what it depends on through tx and keep
	// what it returns to its caller from its last run only.
	Write(ctx context.Context, partition string, fn func(ctx context.Context, tx WriteTx) error) error

	// Row returns a current row; ErrNotFound when absent.
	Row(ctx context.Context, partition, table, rowID string) (Row, error)
	// ReadCommitWindow reads the commits of a window filtered to a table
	// and effective scopes.
	ReadCommitWindow(ctx context.Context, partition string, q CommitWindowQuery) (CommitWindow, error)
	// ReadCommits reads the commits of (afterSeq, throughSeq] with all
	// their changes, oldest first, at most limit of them (realtime fan-out
	// of commits appended by another server instance).
	ReadCommits(ctx context.Context, partition string, afterSeq, throughSeq int64, limit int) ([]Commit, error)
	// ScanRows reads a page of current rows inside scopes, by row id.
	ScanRows(ctx context.Context, partition string, q RowScanQuery) ([]Row, error)
	// PageBoundaries walks the rows a chain of ScanRows calls of q would
	// read (q.Table, q.Scopes, q.After; q.Limit rows a page) from the
	// scope index alone, no row read, and returns the row id that ends
	// each full page another matching row follows, at most pages of them,
	// in row-id order: the After cursors of the following pages, known
	// ahead so that the pages can be read concurrently. q.Scopes must have
	// exactly one key (ErrScanRequiresScope without one,
	// ErrBoundariesOneKey with more). The walk is one consistent read; rows
	// written after it may move the boundaries of a later scan.
	PageBoundaries(ctx context.Context, partition string, q RowScanQuery, pages int) ([]string, error)
	// ListRows reads a page of a table's current rows in a partition, by
	// row id (bytewise), whatever their scopes: an operator and test read,
	// never a client-facing one.
	ListRows(ctx context.Context, partition, table string, after *string, limit int) ([]Row, error)
	// LatestScopedChangeSeq returns the newest commit sequence whose change
	// to table carries one of the values of the scope variable in the
	// change-scope index, or 0 (the sqlite-lane scope pin of §4.7).
	LatestScopedChangeSeq(ctx context.Context, partition, table string, scope wire.ScopeValues) (int64, error)
	// PushResult reads the journal; ErrNotFound when the commit id is new,
	// ErrUnreadable when the record exists but cannot be decoded.
	PushResult(ctx context.Context, partition, clientID, clientCommitID string) (PushRecord, error)

	// Client returns a client record; ErrNotFound when absent.
	Client(ctx context.Context, partition, clientID string) (ClientRecord, error)
	// PutClient creates a client record or replaces one bound to the same
	// actor. A record bound to another actor is left as it is and the call
	// fails with ErrClientBound: a clientId never changes actor (§1.5).
	PutClient(ctx context.Context, partition string, rec ClientRecord) error
	// BindClient binds rec.ClientID to rec.ActorID atomically: when the
	// partition holds no record of the client, rec is created; otherwise
	// nothing is written. It returns the stored record (the one created or
	// the one already there), whose ActorID the caller compares with its
	// own: of two actors binding the same fresh clientId concurrently,
	// exactly one gets its actor back.
	BindClient(ctx context.Context, partition string, rec ClientRecord) (ClientRecord, error)
	// AdvanceClientCursor applies a realtime ack; it reports whether a
	// record was updated (false: no such record, other actor, or the
	// cursor was not behind). A stale epoch is ErrEpochMismatch.
	AdvanceClientCursor(ctx context.Context, partition string, a CursorAdvance) (bool, error)
	// ActiveCursorFloor returns the lowest cursor among the clients of
	// the partition updated at or after sinceMs that have a cursor.
	ActiveCursorFloor(ctx context.Context, partition string, sinceMs int64) (floor int64, ok bool, err error)

	// CommitSeqBefore returns the newest commit sequence created before
	// beforeMs, or 0.
	CommitSeqBefore(ctx context.Context, partition string, beforeMs int64) (int64, error)
	// PruneThrough deletes the log (commits, changes, their scope index and
	// tombstones) through throughSeq and raises the horizon to it, in one
	// transaction under the partition's write boundary. The horizon never
	// moves back; throughSeq is capped at the newest commit. A logEpoch
	// other than the partition's is ErrEpochMismatch and deletes nothing.
	PruneThrough(ctx context.Context, partition, logEpoch string, throughSeq int64) (PruneResult, error)

	// Stats returns a snapshot of the store's counters.
	Stats() Stats
	// Close releases the store; later calls fail with ErrClosed.
	Close() error
}

// RequestStateReader is implemented by stores that read, in one go, what
// a sync request checks before it runs: the partition's state, its serve
// gate at the running schema version, and the client's record (with any
// deferred write of it applied, as Client returns it). On SQLite that is
// one read connection, on Postgres one round trip, instead of three.
type RequestStateReader interface {
	// ReadRequestState reads the request state; with clientID "" it reads
	// no client record.
	ReadRequestState(ctx context.Context, partition, clientID string, running int32) (RequestState, error)
}

// CommitWindowBatcher is implemented by stores that read the windows of
// several subscriptions of one pull in one go (Postgres: one round trip
// for all of them instead of one each). ReadCommitWindows answers each
// query as ReadCommitWindow would, in order; when the queries ask for
// StateAfter (all with the same Running), every window's State may be one
// read made after the rows of all of them.
type CommitWindowBatcher interface {
	ReadCommitWindows(ctx context.Context, partition string, qs []CommitWindowQuery) ([]CommitWindow, error)
}

// ScopeRowCounter counts the rows of a table in a partition holding a value
// of one scope variable, from the row scope index alone, up to a limit:
// min(rows, limit). A store without it is asked with PageBoundaries.
type ScopeRowCounter interface {
	CountScopeRows(ctx context.Context, partition, table string, scope wire.ScopeValues, limit int) (int, error)
}

// PageChainer is implemented by stores whose page boundaries cost about
// as much to walk as the pages cost to read. A bootstrap reads such a
// store's pages as a chain, each from the end of the one before and
// ahead of the response, instead of walking their boundaries first and
// reading the pages concurrently.
type PageChainer interface {
	// ChainPages reports whether bootstraps read the store's pages as a
	// chain.
	ChainPages() bool
}

// BoundaryWalker is implemented by stores that can hand the page
// boundaries of PageBoundaries to the caller as the walk finds them, so
// that a bootstrap starts building each page as soon as its cursor is
// known instead of after the whole walk.
type BoundaryWalker interface {
	// WalkPageBoundaries calls found with the boundaries PageBoundaries(ctx,
	// partition, q, pages) returns, in the same order, each as soon as it
	// is known (a boundary is known once the row after it is seen). It
	// fails as PageBoundaries does; an error may come after some
	// boundaries were found, which stay true of the walk's snapshot.
	WalkPageBoundaries(ctx context.Context, partition string, q RowScanQuery, pages int, found func(rowID string)) error
}

// RowVisitor is implemented by stores that can hand the rows of a scan
// to the caller as they are read instead of collecting them (a bootstrap
// page is encoded straight from the store's buffers: no []Row of the
// page, no copy of its payloads).
type RowVisitor interface {
	// VisitRows calls visit with the rows ScanRows(ctx, partition, q)
	// returns, in the same order. The *Row, its strings and its byte
	// slices are valid only during the call (the store reuses them): the
	// caller copies what it keeps. visit returning false ends the scan
	// (VisitRows then returns nil). An error may come after some rows
	// were visited.
	VisitRows(ctx context.Context, partition string, q RowScanQuery, visit func(r *Row) bool) error
}

// VisitEach hands rows to visit in order until visit returns false: how a
// RowVisitor visits a scan it reads whole (ScanRows' rows).
func VisitEach(rows []Row, visit func(r *Row) bool) {
	for i := range rows {
		if !visit(&rows[i]) {
			return
		}
	}
}

// RequestState is the answer to ReadRequestState. A partition the store
// does not know is ErrNotFound, as with Partition.
type RequestState struct {
	Partition Partition
	Gate      ServeGate
	// Client is the client's record; nil when the partition holds none.
	Client *ClientRecord
}

// WriteTx is the view of a partition write transaction. It is valid only
// inside the function passed to Store.Write, and must not be used from
// other goroutines. A driver may send a write later than the call that
// made it (with its next statement that has an answer): its failure is
// then reported by a later call, or fails the Write.
type WriteTx interface {
	// Partition returns the partition the transaction writes to.
	Partition() string
	// Row reads a current row, seeing this transaction's own writes.
	Row(ctx context.Context, table, rowID string) (Row, error)
	// Tombstone returns the commit sequence of the row's delete tombstone
	// (within the horizon), and whether there is one.
	Tombstone(ctx context.Context, table, rowID string) (seq int64, ok bool, err error)
	// ClearTombstone removes the row's tombstone (an insert re-creates a
	// deleted row).
	ClearTombstone(ctx context.Context, table, rowID string) error
	// UpsertRow writes a row and its scope index entries. A violated
	// declared unique index is a *ConstraintError.
	UpsertRow(ctx context.Context, w RowWrite) error
	// DeleteRow removes a row and its scope index entries; deleting an
	// absent row is not an error.
	DeleteRow(ctx context.Context, table, rowID string) error
	// RowsByColumn reads, seeing this transaction's writes, up to limit
	// current rows of table whose materialized column equals value (a
	// declared reference's child lookup, §6.11), by row id.
	RowsByColumn(ctx context.Context, table, column string, value wire.Value, limit int) ([]Row, error)
	// PushResult reads the journal on the transaction's connection.
	PushResult(ctx context.Context, clientID, clientCommitID string) (PushRecord, error)
	// PutPushResult records a commit's outcome unless one is already
	// recorded (first writer wins); it reports whether it stored rec.
	PutPushResult(ctx context.Context, clientID, clientCommitID string, rec PushRecord) (bool, error)
	// AppendCommit appends a commit with the next sequence of the
	// partition (dense, gap-free: a rolled-back append consumes nothing),
	// its changes and their scope index, stamps it with the running
	// schema version, and records a tombstone for every delete change.
	AppendCommit(ctx context.Context, c NewCommit) (int64, error)
	// Candidate runs fn in a nested savepoint: when fn fails, its writes
	// are undone and the transaction goes on (a push records a rejected
	// result after discarding the rejected commit's writes).
	Candidate(ctx context.Context, fn func(ctx context.Context) error) error
}

// RowKey names a row of a table.
type RowKey struct {
	Table string
	RowID string
}

// WriteReads names what a Write's function reads first: a commit's push
// result (ClientID and ClientCommitID; none when ClientID is empty), the
// push results of the further commits of the same client that the
// function applies after it (MoreCommitIDs: a request's later commits,
// applied in the same Write), and the current rows, with their
// tombstones, that their operations name.
type WriteReads struct {
	ClientID       string
	ClientCommitID string
	MoreCommitIDs  []string
	Rows           []RowKey
}

// ReadAheadWriter is implemented by stores that group writes and can read
// ahead for them (Postgres). WriteReadAhead is Write told what fn reads
// first: the driver may read it for all the Writes of a batch at once, so
// that fn's PushResult, Row and Tombstone calls need no round trip each.
// It is a hint: every call of fn's transaction is answered as it would be
// without it, and a key it does not name is read when asked for.
type ReadAheadWriter interface {
	WriteReadAhead(ctx context.Context, partition string, reads WriteReads, fn func(ctx context.Context, tx WriteTx) error) error
}

// CursorBatchAdvancer is implemented by stores that apply many realtime
// acks of one partition in one write (the hub's periodic flush of its
// sockets' acknowledged cursors), rather than one write per ack. Each
// advance is applied as AdvanceClientCursor would apply it: monotonic,
// only for the record's own actor, and not at all when its LogEpoch is
// not the partition's (no error for that one: the others still apply).
type CursorBatchAdvancer interface {
	// AdvanceClientCursors reports which advances updated a record.
	AdvanceClientCursors(ctx context.Context, partition string, advances []CursorAdvance) ([]bool, error)
}

// LocalWriter is implemented by stores whose write boundary is an
// in-process writer (SQLite's single write connection): entering it costs
// a request no more than a read, so the engine looks a pushed commit up
// in the journal only inside the write, not also before it.
type LocalWriter interface {
	LocalWriter()
}

// CommitListener is implemented by stores that several server instances
// share (Postgres): it reports every commit appended by any instance, so
// that each instance fans it out to its own sockets.
type CommitListener interface {
	// ListenCommits calls fn for each commit notification until ctx ends,
	// reconnecting after failures. After a reconnect, notifications may
	// have been missed: fn then receives one with Reconnected set, and the
	// listener must check the partitions it serves for gaps. A driver may
	// send one at other times too (on its first connect, or for a commit
	// whose partition it cannot name). Each failure to connect or to stay
	// connected is reported to fn with Lost set.
	ListenCommits(ctx context.Context, fn func(CommitNotification)) error
}

// CommitHeadsReader is implemented by stores with a CommitListener: it
// reads the newest commit sequence of many partitions in one call. A
// listening instance uses it to find commits whose notification never came
// (the process that appended them died between its COMMIT and its
// notification) in partitions that have gone quiet since.
type CommitHeadsReader interface {
	// CommitHeads returns each known partition's newest commit sequence
	// (0 for a partition without commits); unknown ones are left out.
	CommitHeads(ctx context.Context, partitions []string) (map[string]int64, error)
}

// CommitNotification announces a durable commit, or (Grants set) that an
// actor's grants changed.
type CommitNotification struct {
	Partition   string
	Seq         int64
	Reconnected bool
	// Lost reports that the driver lost its listen connection, or could
	// not make it: no notification comes until one with Reconnected set.
	Lost bool
	// Grants announces a GrantNotifier call: the receiver resolves the
	// scopes of the actor's sockets in the partition again. An empty
	// ActorID means every actor of the partition, an empty Partition every
	// partition.
	Grants  bool
	ActorID string
}

// GrantNotifier is implemented by stores that several server instances
// share (Postgres): it announces to the CommitListener of every instance
// that an actor's grants changed, so that each narrows its own sockets.
type GrantNotifier interface {
	NotifyGrants(ctx context.Context, partition, actorID string) error
}
