// Package engine is the protocol core of the server: it answers one decoded
// SSP2 request (push, pull, bootstrap) against a store, whatever transport
// carried it. The HTTP handler and the realtime socket round both call
// Engine.Serve, so nothing in §§4–7 differs between the bindings.
package engine

import (
	"context"
	"io"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/syncgo/syncgo/hostapi"
	"github.com/syncgo/syncgo/reaction"
	"github.com/syncgo/syncgo/schema"
	"github.com/syncgo/syncgo/store"
	"github.com/syncgo/syncgo/validate"
	"github.com/syncgo/syncgo/wire"
)

// Auth is what host authentication established for a request.
type Auth struct {
	ActorID   string
	Partition string
}

// ScopeRequest is hostapi.ScopeRequest.
type ScopeRequest = hostapi.ScopeRequest

// ScopeResolver returns the allowed scopes of an actor: variable to
// values, where "*" allows any value (§3.2). An error fails closed:
// subscriptions revoke and writes are forbidden.
type ScopeResolver func(ctx context.Context, req ScopeRequest) (map[string][]string, error)

// CommitNotice is hostapi.CommitNotice.
type CommitNotice = hostapi.CommitNotice

// Config configures an Engine. Zero fields take the defaults of
// withDefaults.
type Config struct {
	Store   store.Store
	Schema  *schema.Compiled
	Resolve ScopeResolver
	// Now returns the server clock in Unix milliseconds.
	Now func() int64
	// NewEpoch returns a fresh, unpredictable log epoch.
	NewEpoch func() string
	// OnCommit is called after a commit is durable, for realtime fan-out.
	OnCommit func(CommitNotice)
	// OnPushResult, when set, is called with the status of every
	// PUSH_RESULT answered (conflict: a rejection with a conflict result),
	// for metrics.
	OnPushResult func(status wire.PushStatus, conflict bool)
	// OnResolve is called with every resolution of a request's scopes,
	// before the request answers (ok is false when the resolver failed):
	// realtime narrows the client's sockets to it. started is when the
	// resolution began: one that began before a resolution already
	// applied is stale.
	OnResolve func(ctx context.Context, auth Auth, clientID string, allowed map[string][]string, ok bool, started time.Time)
	// Segments stores the segments served by reference: rows segments and
	// sqlite images.
	Segments SegmentStore
	// EncodeSegment, when set, compresses a segment's bytes (size of
	// them, read from r) into the body its downloads serve (content coding
	// enc), and segments are published as bodies to a segment store that
	// keeps them (store.SegmentBodyStore): the store writes the small
	// body, the hot segments keep it, and a download negotiated to enc
	// serves it as it is. nil: segments are stored as their bytes.
	EncodeSegment func(id string, r io.Reader, size int64) (enc string, body []byte, err error)
	// CompressBody, when set, compresses a whole response message into
	// the content coding encoding, for the response body of a catch-up
	// window compressed ahead (precompress.go); ok false when the
	// transport would not send it so (an unknown coding, a body it sends
	// uncompressed). nil: nothing is compressed ahead.
	CompressBody func(encoding string, raw []byte) (body []byte, ok bool)
	// Blobs stores blob bytes (§5.9); nil leaves blob_ref values
	// unchecked and unindexed.
	Blobs store.BlobStore
	// URLs mints the signed URLs of segment descriptors for clients that
	// accept them (accept bit 3, §5.4); nil issues none.
	URLs URLIssuer
	// ImageDir is the directory of the temporary files of sqlite-image
	// builds (§5.3); empty means os.TempDir().
	ImageDir string
	Logger   *slog.Logger
	Limits   Limits
	// Window lists older schema versions still served, newest first (§9);
	// see ValidateWindow.
	Window []*schema.Compiled
	// Declarations are the backfill checkpoints this process declares:
	// it may serve while they are incomplete (§2.4).
	Declarations []store.CheckpointDeclaration
	// CRDTMergers maps a crdtType to the merger of its columns (§5.10.2).
	// A push that writes a crdt column whose type has none fails with
	// sync.crdt_merge_failed.
	CRDTMergers map[string]CRDTMerger
	// Validators are the per-table write validators (§6.7), by table name.
	Validators map[string]validate.Validator
	// CommitValidator is the whole-commit validator (§6.8).
	CommitValidator validate.CommitValidator
	// Leases turns auth leases on (§7.3); nil: off.
	Leases *LeaseConfig
	// Reactions plans durable reactions in the push transaction (§6.9,
	// reactions.go); nil: none.
	Reactions *reaction.Config
	// OnReactions, when set, is called after a write that planned
	// reactions is durable (the runner's wake-up).
	OnReactions func()
}

// CRDTMerger merges the stored value of a crdt column (nil for NULL or a
// new row) with a pushed one (§5.10.2).
type CRDTMerger interface {
	Merge(stored, incoming []byte) ([]byte, error)
}

// DefaultCatchUpBootstrapAfter is the default of
// Limits.CatchUpBootstrapAfter.
const DefaultCatchUpBootstrapAfter = 10_000

// DefaultMaxCRDTBytes is the default of Limits.MaxCRDTBytes.
const DefaultMaxCRDTBytes = 8 << 20

// URLIssuer mints signed segment URLs (§5.4).
type URLIssuer interface {
	// SegmentURL returns the URL of a segment published in partition for
	// scopeDigest, and its expiry (Unix milliseconds).
	SegmentURL(segmentID, partition, scopeDigest string, nowMs int64) (url string, expiresAtMs int64, err error)
}

// NeverInline is the InlineSegmentMaxBytes of a server that sends every
// rows segment by reference to clients that accept external segments.
const NeverInline = -1

// Limits is hostapi.Limits.
type Limits = hostapi.Limits

func (c Config) withDefaults() Config {
	if c.Now == nil {
		c.Now = func() int64 { return time.Now().UnixMilli() }
	}
	if c.NewEpoch == nil {
		c.NewEpoch = randomEpoch
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	if c.Limits.MaxOperationsPerRequest <= 0 {
		c.Limits.MaxOperationsPerRequest = 500
	}
	if c.Limits.InlineSegmentMaxBytes == 0 {
		c.Limits.InlineSegmentMaxBytes = 256 << 10
	}
	if c.Limits.SegmentTTL <= 0 {
		c.Limits.SegmentTTL = 24 * time.Hour
	}
	if c.Limits.SegmentForgetAfter <= 0 {
		c.Limits.SegmentForgetAfter = time.Hour
	}
	if c.Limits.MaxBlobBytes <= 0 {
		c.Limits.MaxBlobBytes = 64 << 20
	}
	if c.Limits.BlobGracePeriod <= 0 {
		c.Limits.BlobGracePeriod = 24 * time.Hour
	}
	if c.Limits.MaxCascadeOperations <= 0 {
		c.Limits.MaxCascadeOperations = 1000
	}
	if c.Limits.TouchInterval <= 0 {
		c.Limits.TouchInterval = time.Second
	}
	if c.Limits.MaxSubscriptionsPerRequest <= 0 {
		c.Limits.MaxSubscriptionsPerRequest = 1000
	}
	if c.Limits.CatchUpBootstrapAfter == 0 {
		c.Limits.CatchUpBootstrapAfter = DefaultCatchUpBootstrapAfter
	}
	if c.Limits.MaxCRDTBytes <= 0 {
		c.Limits.MaxCRDTBytes = DefaultMaxCRDTBytes
	}
	if c.Limits.SQLiteImageMaxBytes == 0 {
		c.Limits.SQLiteImageMaxBytes = 64 << 20
	}
	if c.Segments == nil {
		c.Segments = NewMemorySegments(256 << 20)
	}
	return c
}

// Engine answers sync requests.
type Engine struct {
	cfg Config

	mu sync.Mutex
	// touched are the partitions served lately: a touch is written at
	// most once per TouchInterval, and the retention rounds prune them.
	// Partitions come from the tokens, so the set is swept: without
	// retention a partition idle for a touch interval is forgotten (at
	// the first touch that finds the set at touchSweepAt entries);
	// RunRetention forgets one once a round pruned it after age_force of
	// idleness. retaining is set while RunRetention runs.
	touched      map[string]touchState
	touchSweepAt int
	retaining    bool
	pages        pageCache
	// bounds shares the page boundaries of bootstrap scans (pagePlan).
	bounds sharedCache[boundsKey, []string]
	// pageRowBytes is the bytes per row of the last page visited from
	// the store (visitPage): the next one's capacity.
	pageRowBytes atomic.Int64
	images       imageIndex
	// published remembers recent segment publications (segments.go).
	published recentPublications
	// hot serves the downloads of the segments published lately
	// (hotsegments.go).
	hot hotSegments
	// ahead holds the commit windows read ahead for catch-ups
	// (readahead.go).
	ahead *readAhead
	// rowFloors remembers the row counts walked by catch-up decisions
	// (catchup.go); catchUpResets counts the pulls they reset.
	rowFloors     rowFloors
	catchUpResets atomic.Int64
	// pushResultsPruned counts the push-result journal records the
	// journal prunes deleted (pushresults.go).
	pushResultsPruned atomic.Int64
}

type touchState struct {
	atMs      int64
	partition store.Partition
}

// New returns an Engine.
func New(cfg Config) *Engine {
	return &Engine{cfg: cfg.withDefaults(), touched: map[string]touchState{}, pages: pageCache{max: 1024, size: pageBytes, maxBytes: pageCacheBytes},
		bounds: sharedCache[boundsKey, []string]{max: 256}, ahead: newReadAhead()}
}

// Schema returns the served schema.
func (e *Engine) Schema() *schema.Compiled { return e.cfg.Schema }

// Store returns the engine's store.
func (e *Engine) Store() store.Store { return e.cfg.Store }

// Limits returns the engine's limits, defaults applied.
func (e *Engine) Limits() Limits { return e.cfg.Limits }

// Segments returns the segment store.
func (e *Engine) Segments() SegmentStore { return e.cfg.Segments }

// Now returns the engine's clock.
func (e *Engine) Now() int64 { return e.cfg.Now() }

// touchPartition records the authenticated request in the partition
// registry (at most once per TouchInterval per process) and returns the
// partition state. The epoch and counters are re-read on every call.
func (e *Engine) touchPartition(ctx context.Context, partition string) (store.Partition, error) {
	p, _, err := e.touchPartitionFor(ctx, partition, "")
	return p, err
}

// touchPartitionFor is touchPartition for a request of clientID: when the
// partition needs no touch and the store reads a request's state in one go
// (store.RequestStateReader), it also returns the serve gate and client
// record that the request checks next; nil otherwise.
func (e *Engine) touchPartitionFor(ctx context.Context, partition, clientID string) (store.Partition, *store.RequestState, error) {
	now := e.cfg.Now()
	e.mu.Lock()
	st, ok := e.touched[partition]
	fresh := ok && now-st.atMs < e.cfg.Limits.TouchInterval.Milliseconds() && now >= st.atMs
	if ok && !fresh {
		// This request touches; the concurrent ones of the partition read
		// (a touch takes the registry row's lock and a commit: many at
		// once would queue on it).
		e.touched[partition] = touchState{atMs: now, partition: st.partition}
	}
	e.mu.Unlock()
	if fresh {
		if rs, ok := e.cfg.Store.(store.RequestStateReader); ok && clientID != "" {
			st, err := rs.ReadRequestState(ctx, partition, clientID, e.cfg.Schema.Version())
			if err == nil {
				return st.Partition, &st, nil
			}
		} else if p, err := e.cfg.Store.Partition(ctx, partition); err == nil {
			return p, nil, nil
		}
	}
	p, err := e.cfg.Store.TouchPartition(ctx, partition, now, e.cfg.NewEpoch())
	if err != nil {
		// The touch is bookkeeping: when it cannot be written (a full
		// disk) an existing partition is still served, reads keep
		// working, and writes fail on their own with their own error.
		// Only a partition that does not exist yet needs the write.
		rp, rerr := e.cfg.Store.Partition(ctx, partition)
		if rerr != nil {
			return store.Partition{}, nil, err
		}
		e.cfg.Logger.WarnContext(ctx, "partition touch failed; serving without it", "partition", partition, "err", err)
		p = rp
	}
	e.mu.Lock()
	e.touched[partition] = touchState{atMs: now, partition: p}
	if !e.retaining && len(e.touched) >= max(e.touchSweepAt, minTouchSweep) {
		e.sweepTouchedLocked(now)
	}
	e.mu.Unlock()
	return p, nil, nil
}

// minTouchSweep is the fewest remembered partitions that start a sweep.
const minTouchSweep = 1024

// sweepTouchedLocked forgets the partitions not touched within a touch
// interval (when no retention round needs them); the next sweep waits
// for the set to double. e.mu is held.
func (e *Engine) sweepTouchedLocked(now int64) {
	keep := e.cfg.Limits.TouchInterval.Milliseconds()
	for p, st := range e.touched {
		if now-st.atMs >= keep {
			delete(e.touched, p)
		}
	}
	e.touchSweepAt = 2 * len(e.touched)
}

// ResolveClock lets a scope resolver report that what it returned was
// read before the call began (a pass's read-ahead): At is then when it
// was read, and the resolution counts as begun then (a resolution applied
// meanwhile is not replaced by older values).
type ResolveClock struct{ At time.Time }

type resolveClockKey struct{}

// WithResolveClock returns ctx carrying c for the resolver.
func WithResolveClock(ctx context.Context, c *ResolveClock) context.Context {
	return context.WithValue(ctx, resolveClockKey{}, c)
}

// ReadAt reports, to the ResolveClock ctx carries (if any), that the
// resolver returns values read at t.
func ReadAt(ctx context.Context, t time.Time) {
	if c, _ := ctx.Value(resolveClockKey{}).(*ResolveClock); c != nil && (c.At.IsZero() || t.Before(c.At)) {
		c.At = t
	}
}

// TouchedPartitions returns the number of partitions the engine remembers
// as served.
func (e *Engine) TouchedPartitions() int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return len(e.touched)
}
