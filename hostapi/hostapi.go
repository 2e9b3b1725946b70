// Package hostapi holds the types a host's configuration and callbacks
// use: the protocol limits, the scope request a ScopeResolver answers, the
// commit notice of OnCommit, the retention policy, the lease settings and
// the blob sweep counts. Package syncgo names each of them (syncgo.Limits
// is hostapi.Limits, and so on); they live here so that go doc shows
// their fields.
package hostapi

import (
	"time"

	"github.com/syncgo/syncgo/store"
)

// ScopeRequest is the input of the host's scope resolver.
type ScopeRequest struct {
	// Partition and ActorID are those the request authenticated as.
	Partition string
	ActorID   string
	// ClientID is the client id the request names (a pull's header, a
	// socket's clientId, a remote operation's clientId), as the client
	// asserts it: it is not authenticated, and it is empty where the
	// request names none (a segment or blob download). A resolver must
	// not grant more by it: any client of the actor can name any client
	// id.
	ClientID string
}

// CommitNotice describes an applied commit for realtime fan-out.
type CommitNotice struct {
	Partition   string
	Seq         int64
	CreatedAtMs int64
	ActorID     string
	Changes     []store.Change
}

// Limits are the host-configured limits of the protocol.
type Limits struct {
	// MaxOperationsPerRequest caps the operations across all commits of a
	// request (§6.1). Default 500.
	MaxOperationsPerRequest int
	// InlineSegmentMaxBytes is the largest rows segment sent inline
	// (§5.7) to a client that also accepts external segments. 0 means the
	// default, 256 KiB; syncgo.NeverInline (any negative value) sends every
	// segment as a SEGMENT_REF to such clients.
	InlineSegmentMaxBytes int
	// SegmentTTL is how long a stored segment stays downloadable.
	// Default 24 h.
	SegmentTTL time.Duration
	// SegmentForgetAfter is how long an expired segment publication is
	// kept (its download answers sync.segment_expired) before a sweep
	// deletes it (sync.not_found from then on). Default 1 h.
	SegmentForgetAfter time.Duration
	// MaxBlobBytes caps an uploaded blob (§5.9.3). Default 64 MiB.
	MaxBlobBytes int64
	// BlobGracePeriod is how long an uploaded blob that no row references
	// is kept before a sweep deletes it (§5.9.2), and so how long a client
	// may take from upload to push. Default 24 h.
	BlobGracePeriod time.Duration
	// MaxCascadeOperations caps the operations declared references may
	// append to one commit (§6.11). Default 1000.
	MaxCascadeOperations int
	// TouchInterval is how often a partition's last-authenticated time is
	// written per process. Default 1 s.
	TouchInterval time.Duration
	// SQLiteImageMaxBytes is the largest sqlite image served (§5.3); a
	// bigger snapshot is served on the rows lane. Default 64 MiB; negative
	// disables the sqlite lane.
	SQLiteImageMaxBytes int64
	// MaxSubscriptionsPerRequest caps the subscriptions of one pull, and
	// so the subscriptions a client has registered (the spec sets no
	// number; each subscription is a section of the response, a stored
	// registration and a socket registration). A request over it is
	// refused as a whole with sync.invalid_subscription. Default 1000.
	MaxSubscriptionsPerRequest int
	// MaxCRDTBytes bounds a crdt column value (§5.10): a pushed value or
	// a merge result larger than it fails the operation with
	// sync.crdt_merge_failed. Default 8 MiB.
	MaxCRDTBytes int
	// CatchUpBootstrapAfter: a pull whose cursor is more than this many
	// commits behind the partition's newest (and more than its
	// limitCommits) is answered reset, a fresh bootstrap, instead of the
	// replay of the log (§8.4), when a change to the subscription's table
	// in its scope follows the cursor and the scope's rows are at most
	// half the gap and at most 10,000. Default 10,000; negative: always replay.
	CatchUpBootstrapAfter int64
}

// RetentionPolicy is the pruning policy of §4.6. Zero fields take the
// normative defaults; a host may only raise them.
type RetentionPolicy struct {
	// ActiveWindow: clients whose cursor record was updated within it hold
	// the horizon back. Default (and floor) 14 days.
	ActiveWindow time.Duration
	// AgeForce: commits older than this may be pruned regardless of
	// laggard cursors. Default (and floor) 30 days.
	AgeForce time.Duration
	// MinRetainedCommits: the newest commits always kept. Default (and
	// floor) 1000.
	MinRetainedCommits int64
	// PushResultsMaxAge turns on the pruning of the push-result journal
	// (the idempotency records of §2.3, sync_push_results): a record
	// recorded longer ago is deleted by the retention rounds, and a retry
	// of its commit is then applied anew as a new commit. Zero (the
	// default) or negative keeps the journal forever. A value below
	// ActiveWindow (after its floor) is raised to it: a client offline
	// for less than the active window that lost an ack must find its
	// commit's record when it retries. Records without a recorded time
	// are kept.
	PushResultsMaxAge time.Duration
}

// LeaseConfig turns auth leases on (§7.3).
type LeaseConfig struct {
	// TTL is a lease's validity after its issuance or latest refresh.
	TTL time.Duration
}

// BlobSweep reports a sweep of the blob store.
type BlobSweep struct {
	// Blobs and Bytes count the unreferenced blobs deleted; Uploads what
	// interrupted uploads had left.
	Blobs, Bytes, Uploads int64
}
