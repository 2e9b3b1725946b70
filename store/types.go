package store

import (
	"github.com/syncgo/syncgo/schema"
	"github.com/syncgo/syncgo/wire"
)

// Partition is the state of one partition: its registry entry (log epoch)
// and its commit-log counters.
type Partition struct {
	ID string
	// LogEpoch is the identity of the partition's log (§2.1); it changes
	// when the log is rewound by a restore.
	LogEpoch string
	// EpochRequired is set once the epoch has been rotated: from then on
	// clients must present it (wire version 1 clients are refused).
	EpochRequired         bool
	LastAuthenticatedAtMs int64
	// MaxCommitSeq is the newest commit sequence (0 for an empty log).
	MaxCommitSeq int64
	// HorizonSeq is the pruning horizon: commits at or below it are gone.
	HorizonSeq int64
}

// Row is a current row of a synced table.
type Row struct {
	Table         string
	RowID         string
	ServerVersion int64
	// Scopes are the row's stored scopes (§3.1), in canonical key order.
	Scopes wire.StoredScopes
	// Payload is the row in the full-row codec of the stored schema.
	Payload []byte
	// ColumnVersions is the per-column version record: LEB128 pairs of
	// (ordinal, version) for the columns whose version differs from the
	// default, or nil when every column is at ServerVersion.
	ColumnVersions []byte
}

// RowWrite is a row to insert or replace.
type RowWrite struct {
	Row
	// Values are the decoded Payload, used to fill the table's typed
	// (materialized) columns. When nil the driver decodes Payload.
	Values []wire.Value
}

// Change is one change of a commit, as stored in the log.
type Change struct {
	Table string
	RowID string
	Op    wire.Op
	// RowVersion is the row's version after an upsert; 0 for a delete.
	RowVersion int64
	Scopes     wire.StoredScopes
	// Payload is the full row after an upsert, nil for a delete.
	Payload []byte
}

// NewCommit is a commit to append to a partition's log.
type NewCommit struct {
	ClientID       string
	ClientCommitID string
	ActorID        string
	CreatedAtMs    int64
	Changes        []Change
}

// Commit is a commit read back from the log.
type Commit struct {
	Seq            int64
	CreatedAtMs    int64
	ActorID        string
	ClientID       string
	ClientCommitID string
	Changes        []Change
}

// CommitWindowQuery selects the commits of (AfterSeq, ThroughSeq] that
// change rows of Table inside the effective Scopes, for an incremental pull
// (§4.5).
type CommitWindowQuery struct {
	Table string
	// Scopes are the effective scopes; a change matches when, for every
	// key, its stored value for that key is among the key's values. It must
	// not be empty.
	Scopes     wire.ScopeMap
	AfterSeq   int64
	ThroughSeq int64
	// LimitChanges bounds the changes returned; a commit is never split,
	// and the first commit is returned whole even when it alone exceeds
	// the limit. Zero or less means no limit.
	LimitChanges int
	// StateAfter asks a store that implements RequestStateReader to read
	// also, after the window's rows and with them (in their read
	// transaction on SQLite, their round trip on Postgres), the
	// partition's state and its serve gate at schema version Running:
	// the horizon recheck of §4.6 and the response's read-verify.
	StateAfter bool
	Running    int32
	// Bulk tells the store that the window is expected to be full (the
	// next window of a catch-up whose last one the limit cut short): a
	// store may skip the reads it tunes for windows of a commit or two.
	// The answer is the same either way.
	Bulk bool
	// WireOnly tells the store that the caller reads only what a COMMIT
	// frame carries: a store may leave each commit's ClientID and
	// ClientCommitID empty (and not read them). Everything else is as
	// without it.
	WireOnly bool
}

// CommitWindow is the answer to a CommitWindowQuery.
type CommitWindow struct {
	// Commits hold only the matching changes, oldest first.
	Commits []Commit
	// Complete reports that the whole window was scanned. When false, the
	// limit stopped the scan after the last commit returned.
	Complete bool
	// State is the state read after the rows when StateAfter asked for it
	// (without a client record); nil when the store did not read it (a
	// window without candidates, or a store without the read).
	State *RequestState
	// Release, when set, gives the window's memory back to the store for
	// its next windows: the caller calls it at most once, after its last
	// use of the commits (their strings, changes and payloads). A window
	// never released is garbage as any other.
	Release func()
}

// RowScanQuery selects a page of the current rows of Table inside Scopes,
// ordered by row id (bytewise), for a bootstrap (§4.7).
type RowScanQuery struct {
	Table  string
	Scopes wire.ScopeMap
	// After, when set, starts the page after this row id.
	After *string
	// Limit bounds the page; it must be positive.
	Limit int
	// NoScopes tells the store that the caller does not read Row.Scopes
	// (a bootstrap page encodes ids, versions and payloads only): with a
	// single effective key, whose index lookup alone proves the match, a
	// store may leave Row.Scopes nil instead of decoding them. With more
	// keys the scopes are decoded for the match and returned.
	NoScopes bool
}

// PushRecord is the durable outcome of a push commit, kept in the
// push-result journal by (partition, clientId, clientCommitId) and replayed
// for a retried delivery (§7.2.1).
type PushRecord struct {
	// Status is PushApplied or PushRejected; a replay of an applied
	// record is answered as cached.
	Status wire.PushStatus
	// CommitSeq is the commit's sequence when applied.
	CommitSeq    int64
	RecordedAtMs int64
	// CacheIdentity distinguishes the first application from replays.
	CacheIdentity string
	// ActorID is the actor that pushed the commit: a replay is answered
	// only to it. Empty in records written without one (older servers).
	ActorID string
	Results []wire.OpResult
	// Details is the PUSH_RESULT_DETAILS companion of a rejection.
	Details []wire.DetailEntry
}

// ClientRecord binds a clientId to its actor within a partition and holds
// its cursor and its most recent subscription list (§4.5, §8.1).
type ClientRecord struct {
	ClientID    string
	ActorID     string
	WireVersion uint16
	// Cursor is a cursor the client proved it holds: the lowest that its
	// last pull's active subscriptions sent (a subscription without one
	// counts the nextCursor answered), kept at a higher stored one over
	// the same subscription list, or raised by a realtime ack (§8.2); -1
	// when it has none. Not the nextCursor answered (§4.5): a lost
	// response would leave it ahead of the client.
	Cursor        int64
	Subscriptions []SubscriptionRecord
	UpdatedAtMs   int64
}

// SubscriptionRecord is one subscription of a client's most recent pull.
type SubscriptionRecord struct {
	ID     string              `json:"id"`
	Table  string              `json:"table"`
	Scopes map[string][]string `json:"scopes"`
	// SchemaVersion is the schema version the client pulled it with: the
	// codec realtime deltas use for it (§9). 0 for records written
	// without one.
	SchemaVersion int32 `json:"schemaVersion,omitempty"`
}

// CursorAdvance moves a client's cursor forward after a realtime ack
// (§8.2): only an existing record of the same actor, only under the
// partition's current log epoch, never backwards.
type CursorAdvance struct {
	ClientID string
	ActorID  string
	LogEpoch string
	Cursor   int64
	AtMs     int64
	// Subscriptions, when not zero, is the SubscriptionsDigest of the
	// subscription list the acking socket registered: the advance applies
	// only while the record stores a list of that digest. An ack covers
	// what its socket delivers; a subscription that a pull over HTTP
	// added or changed since is registered only at the next connect
	// (§8.1), and its cursor is not the ack's.
	Subscriptions uint64
}

// PruneResult reports a prune.
type PruneResult struct {
	// HorizonSeq is the partition's horizon after the prune.
	HorizonSeq int64
	// CommitsDeleted counts the commits removed by this call.
	CommitsDeleted int64
}

// Marker is the schema marker of a database: the schema version its app
// tables are at and their stored layouts.
type Marker struct {
	SchemaVersion int32
	Layout        schema.Layout
}

// Stats is a snapshot of a store's counters.
type Stats struct {
	// Writes counts Write calls that committed.
	Writes int64
	// WriteErrors counts Write calls that returned an error.
	WriteErrors int64
	// Batches counts database transactions that committed writes; fewer
	// Batches than Writes means commits shared transactions (and fsyncs).
	Batches int64
	// Commits counts appended commits.
	Commits int64
	// ConnRetries counts operations run again on a fresh database
	// connection after the one they ran on was lost (Postgres).
	ConnRetries int64
	// RecentWindows counts commit windows cut from the commits the
	// store's writer keeps in memory instead of read from the log
	// (SQLite).
	RecentWindows int64
	// SharedWindows and SharedEntries count the answers of shared reads:
	// short commit windows and request entries answered by one read with
	// the others asked at the same time.
	SharedWindows, SharedEntries int64
}
