package syncgo

import (
	"go.opentelemetry.io/otel/trace"

	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/syncgo/syncgo/hostapi"
	"github.com/syncgo/syncgo/internal/engine"
	"github.com/syncgo/syncgo/internal/memfree"
	"github.com/syncgo/syncgo/internal/reactor"
	"github.com/syncgo/syncgo/internal/realtime"
	"github.com/syncgo/syncgo/schema"
	"github.com/syncgo/syncgo/store"
	"github.com/syncgo/syncgo/syncerr"
	"github.com/syncgo/syncgo/validate"
	"github.com/syncgo/syncgo/wire"
)

// Auth is what host authentication established for a request: the actor
// and the partition its data lives in.
type Auth struct {
	ActorID   string
	Partition string
	// ExpiresAt, when set, is when the credentials expire: realtime
	// sockets opened with them are closed then.
	ExpiresAt time.Time
	// WebSocketProtocol, when set, is the subprotocol a WebSocket upgrade
	// is answered with, if the client offered it (Sec-WebSocket-Protocol):
	// set it when the credentials came in that header, since a browser
	// fails an upgrade whose offered subprotocols the server answers with
	// none. Ignored on other requests.
	WebSocketProtocol string
}

// ScopeRequest is the input of Config.ResolveScopes.
//
// Its fields: go doc github.com/syncgo/syncgo/hostapi.ScopeRequest
type ScopeRequest = hostapi.ScopeRequest

// CommitNotice describes an applied commit (for realtime fan-out hooks).
//
// Its fields: go doc github.com/syncgo/syncgo/hostapi.CommitNotice
type CommitNotice = hostapi.CommitNotice

// Limits are the protocol limits a host may configure.
//
// Its fields: go doc github.com/syncgo/syncgo/hostapi.Limits
type Limits = hostapi.Limits

// MaxIdentifierBytes bounds actor ids, partitions, client ids, commit ids,
// row ids and scope values, in UTF-8 bytes.
const MaxIdentifierBytes = engine.MaxIdentifierBytes

// NeverInline, as Limits.InlineSegmentMaxBytes, sends every rows segment
// by reference (SEGMENT_REF) to clients that accept external segments.
const NeverInline = engine.NeverInline

// RealtimeConfig tunes the realtime channel (§8). Zero fields take the
// defaults noted.
type RealtimeConfig struct {
	// Heartbeat is the heartbeat interval: a socket sent no other frame
	// for this long gets a heartbeat event (§8.5). Default 30 s.
	Heartbeat time.Duration
	// QueueMessages and QueueBytes bound each socket's send queue; a
	// consumer that falls behind gets wake-ups, then is closed. Defaults
	// 256 messages and 1 MiB.
	QueueMessages int
	QueueBytes    int
	// WriteTimeout bounds one socket write. Default 10 s.
	WriteTimeout time.Duration
	// MaxDeltaBytes: a larger delta is sent as a delta-too-large wake.
	// Default 1 MiB.
	MaxDeltaBytes int
	// MaxPresenceBytes caps a presence document. Default 16 KiB.
	MaxPresenceBytes int
	// ReresolveInterval is how often the scopes of every open socket are
	// resolved again (ResolveScopes), so that a socket stops receiving
	// deltas of a scope its actor lost even when the host does not call
	// RevokeActor. Default 60 s; negative disables the periodic pass (the
	// scopes are still re-resolved on each HTTP round of the client).
	ReresolveInterval time.Duration
	// MaxSockets caps the sockets open at once on this server (/realtime
	// and /operations/realtime together), and MaxSocketsPerActor those of
	// one actor (in one partition): an upgrade beyond either is refused
	// before the upgrade with sync.websocket_connection_limit (HTTP 429).
	// Zero: no cap.
	MaxSockets         int
	MaxSocketsPerActor int
	// ReleaseAfterChurn: after a burst of at least this many socket
	// connects and disconnects (and HTTP connections opened and closed,
	// with Server.ConnState set on the http.Server), once none has come or
	// gone for half a second, the server returns its free memory to the
	// system (two full collections, the second debug.FreeOSMemory's, then
	// every free page released), so that a reconnect storm's garbage does
	// not stay resident. It does the same when a burst of requests that
	// filled at least half of MaxConcurrentRequests has drained. Releases,
	// for both causes together, are spaced so that they take about 5 % of
	// the time at most: at least a second apart, and at least 20 times as
	// long as the last one took (tens of milliseconds after a storm of
	// 1,000 clients); a burst that ends sooner is released when that time
	// has passed. Default 500; negative disables both (a process may
	// prefer the runtime's own pacing).
	ReleaseAfterChurn int
	// DisableCompression declines the permessage-deflate extension (RFC
	// 7692) on /realtime sockets and on the watch sockets of
	// /operations/realtime. By default it is accepted when a client
	// offers it (browsers do), without context takeover in either
	// direction: each message is compressed on its own, so an idle socket
	// holds no compressor state, and a delta fanned out is compressed
	// once for every socket. Messages of 128 bytes or more are sent
	// compressed (deltas, sync-round chunks, watch snapshots; wake-ups,
	// heartbeats and presence go as they are), and the client may send
	// compressed ones.
	DisableCompression bool
	// releaseSpacing replaces the releases' least spacing (tests).
	releaseSpacing time.Duration
}

// RetentionPolicy is the pruning policy of §4.6.
//
// Its fields: go doc github.com/syncgo/syncgo/hostapi.RetentionPolicy
type RetentionPolicy = hostapi.RetentionPolicy

// Config configures a Server. Store, Schema, Authenticate and ResolveScopes
// are required (New refuses a Config without one, naming it); every other
// field may be left zero, and its default is noted on it.
type Config struct {
	// Store is the storage driver (sqlitestore or pgstore).
	Store store.Store
	// Schema is the compiled schema served: the current version.
	Schema *schema.Compiled
	// SchemaWindow lists older schema versions still served, newest
	// first (§9). Each must be an append-only prefix of Schema (same
	// tables, primary keys and scopes; appended columns nullable). Their
	// clients get rows in their own layout; the floor response names the
	// oldest as required.
	SchemaWindow []*schema.Compiled
	// Authenticate maps a request (HTTP or WebSocket upgrade) to its actor
	// and partition. An error answers 401 sync.auth_required, unless it is
	// a *syncerr.Error, which is answered as is. An actor id or partition
	// that is empty, not well-formed UTF-8, holds a NUL character or is
	// longer than MaxIdentifierBytes is refused the same way (401
	// sync.auth_required, and a warning to Logger): the wire and the drivers
	// could not carry it.
	Authenticate func(r *http.Request) (Auth, error)
	// ResolveScopes returns the scopes an actor is allowed (§3.2); "*"
	// allows any value. An error fails closed: subscriptions revoke and
	// writes are forbidden.
	ResolveScopes func(ctx context.Context, req ScopeRequest) (map[string][]string, error)
	// GrantQueries add scope values read from the application's synced
	// rows (a membership table, say) to every resolution ResolveScopes
	// answers (GrantQuery).
	GrantQueries []GrantQuery
	// Logger receives server events. Default: discard.
	Logger *slog.Logger
	// Now is the server clock in Unix milliseconds. Default: wall clock.
	Now func() int64
	// MaxRequestBytes caps a /sync request body after decompression, and
	// a /commits body. Default 32 MiB.
	MaxRequestBytes int64
	// MaxBodyMemory bounds the request bodies (POST /sync, /commits,
	// /operations) and socket messages and rounds read and held at once,
	// past the first 64 KiB of each: bodies are read before a request is
	// admitted, so without it N clients sending MaxRequestBytes each
	// would cost N times that. A body that would take the total over it
	// is refused at once with sync.rate_limited (503 and Retry-After); a
	// socket whose round would is closed with 1013 (try again later).
	// Default 256 MiB, and never below MaxRequestBytes; negative:
	// unbounded.
	MaxBodyMemory int64
	// MaxFrameBytes caps one frame of a request. Default 16 MiB.
	MaxFrameBytes int
	// StallTimeout bounds how long a request body, or a socket message
	// once begun, may go without a byte arriving: a slow client may take
	// as long as it needs while bytes keep coming; a stalled one is cut
	// off. Default 30 s.
	StallTimeout time.Duration
	// WriteTimeout bounds each chunk written to an HTTP response: a client
	// that stops reading is cut off after it, and holds at most one chunk
	// of the server's memory meanwhile. Default 30 s.
	WriteTimeout time.Duration
	// MaxConcurrentRequests caps the requests served at once, POST /sync
	// and socket rounds (§8.7) together; MaxQueuedRequests more wait up to
	// QueueTimeout for a slot, and the rest are refused at once with
	// sync.rate_limited (HTTP 503 and Retry-After; on a socket an ERROR
	// frame in the round's response). Defaults 256, 1024 and 3 s; a negative
	// MaxConcurrentRequests disables the cap, a negative
	// MaxQueuedRequests the queue.
	MaxConcurrentRequests int
	MaxQueuedRequests     int
	QueueTimeout          time.Duration
	// RateLimit limits the rate of POST /sync requests, socket rounds and
	// POST /operations, per actor and in total (sync.rate_limited, HTTP 429 and
	// Retry-After). Nil: no rate limit.
	RateLimit *RateLimitConfig
	// Limits are the protocol limits (operation cap, inline segment size,
	// segment TTL).
	Limits Limits
	// OnError observes every failure answered as sync.internal_error,
	// with the route it happened on, except those caused by the client
	// (its request's context cancelled as its connection closed, or a
	// response write that failed or timed out because it stopped
	// reading), which are logged as warnings only.
	OnError func(err error, route string)
	// OnCommit is called after each applied commit.
	OnCommit func(CommitNotice)
	// Retention is the pruning policy; values below the normative floors
	// of §4.6 are raised to them. Its PushResultsMaxAge turns on the
	// pruning of the push-result journal, in the same retention rounds.
	Retention RetentionPolicy
	// Declarations are the backfill checkpoints this process declares: it
	// may serve while they are incomplete, and a schema bump installs them
	// (§2.4). Other processes refuse to serve until they are activated.
	// A declaration is of the running schema version (Schema.Version());
	// a zero SchemaVersion means it, another is refused by New.
	Declarations []store.CheckpointDeclaration
	// Realtime tunes the realtime channel.
	Realtime RealtimeConfig
	// RetentionInterval is how often the retention service prunes each
	// partition this process serves (and, with
	// Retention.PushResultsMaxAge, the next stretch of the push-result
	// journal). Default 1 minute; negative disables it.
	RetentionInterval time.Duration
	// Operations are the remote operations served at POST /operations
	// and GET /operations/realtime (REMOTE.md; docs/remote-operations.md).
	Operations Operations
	// CRDTMergers maps a crdtType (spec §5.10.1) to the merger of the
	// crdt columns that name it. The built-in "yjs-doc" merger (package
	// crdt/yjs, bounded by Limits.MaxCRDTBytes) is registered unless this
	// map has an entry of that name; a nil entry unregisters a type. New
	// refuses a schema (or a schema of SchemaWindow) whose crdt column
	// names a type without a merger.
	CRDTMergers map[string]CRDTMerger
	// Metrics, when set, receives the server's Prometheus metrics (see
	// docs/observability.md); nil: no metrics. Nothing is registered
	// anywhere else. Servers sharing a registry each need a constant
	// label of their own (prometheus.WrapRegistererWith).
	Metrics prometheus.Registerer
	// AccessLog, when set, gets one line per request answered by Handler:
	// method, route, path, status, duration, actor, bytes in and out, the
	// operation and the error code. Never a header value, a query string
	// or a body byte. Nil: no access log.
	AccessLog *slog.Logger
	// TracerProvider, when set, traces the requests Handler answers: a
	// server span per request, the child of the request's W3C
	// traceparent when it has one, named by method and route (POST
	// /sync), with the status, the operation, the error code, the actor
	// and the body sizes, and spans of a request's push and pull under
	// it (docs/observability.md). Nil: no spans, at no cost.
	TracerProvider trace.TracerProvider
	// CORS, when set, answers browser preflights on every route of
	// Handler and adds the CORS headers for the allowed origins; its
	// origin list also guards the /realtime upgrade. Nil: no CORS headers,
	// and a browser may open /realtime only from the handler's own origin
	// (a request without Origin, from a non-browser client, always may).
	CORS *CORSConfig
	// Validators are the write validators (§6.7), by table name: each
	// runs on every operation on its table, and on the operations declared
	// references append to it, after scope authorization and immediately
	// before the write, inside the push transaction (see package validate).
	// A table outside Schema is a configuration error. Nil: no validation.
	Validators map[string]validate.Validator
	// CommitValidator is the whole-commit validator (§6.8): it runs once
	// per new commit, after every operation is staged and references are
	// enforced, before the commit is appended. Nil: none.
	CommitValidator validate.CommitValidator
	// Leases turns auth leases on (§7.3): every round whose scopes
	// ResolveScopes resolved issues or slides the client's lease (stored,
	// so every process of a fleet honours it) and sends a LEASE frame;
	// while ResolveScopes returns ErrAuthorityUnavailable, a round is
	// authorized against the stored lease until it expires
	// (sync.auth_lease_required) or is revoked (RevokeLease,
	// sync.auth_lease_revoked). Nil: off, no LEASE frame.
	Leases *LeaseConfig
	// Segments stores the segments served by reference (SEGMENT_REF) and
	// by signed URL. Default: the store's own (store.SegmentStorer: both
	// drivers keep segments in their database, so every process of a
	// fleet on one database serves every segment, and a restart keeps
	// them); for a store without one, an in-process store that only this
	// process serves from.
	Segments store.SegmentStore
	// SignedURLs, when set, enables signed segment URLs (§5.4) on the
	// server's own origin.
	SignedURLs *SignedURLConfig
	// Blobs stores the uploaded blobs (§5.9) and turns on the blob routes
	// (PUT and GET /blobs/{blobId}, POST /blobs/{blobId}/upload-grant) and
	// the push-time existence check of blob_ref values. Default: the
	// store's own (store.BlobStorer: both drivers keep blobs in their
	// database); package blobfs keeps them on a filesystem. The store must
	// keep the blob reference index (store.BlobRefIndex), which authorizes
	// downloads. Limits.MaxBlobBytes caps a blob.
	Blobs store.BlobStore
	// DisableBlobs turns blobs off: the blob routes answer blob.not_found
	// and blob_ref values are stored unchecked.
	DisableBlobs bool
	// BlobPresign makes blob downloads answer a signed URL of the bytes on
	// this server instead of the bytes (§5.9.5, always-issue), and upload
	// grants answer a signed PUT URL (§5.9.3). It needs SignedURLs;
	// Server.SetBlobPresign changes it at run time.
	BlobPresign bool
	// BlobStorePresignTTL, when positive, makes blob downloads answer a
	// URL the blob store itself signs (§5.4 delegated presign: an object
	// store's presigned GET, valid this long; the spec's bound is 15
	// minutes) instead of the bytes, so the bytes never pass through this
	// server. The blob store must implement store.BlobPresigner (package
	// blobs3 does). It takes precedence over BlobPresign for downloads;
	// upload grants are unchanged.
	BlobStorePresignTTL time.Duration
	// SegmentStorePresignTTL, when positive, makes SEGMENT_REFs sent to
	// clients that accept URLs (accept bit 3) carry a URL the segment
	// store itself signs (§5.4 delegated presign: an object store's
	// presigned GET, valid this long, at most 15 minutes) instead of a
	// signed URL of this server, so the bytes never pass through it.
	// Segments must implement store.SegmentPresigner (blobs3.Segments
	// does); SignedURLs is not needed.
	SegmentStorePresignTTL time.Duration
	// BlobSweepInterval is how often unreferenced blobs older than
	// Limits.BlobGracePeriod are deleted. Default 1 hour; negative
	// disables it.
	BlobSweepInterval time.Duration
	// SegmentSweepInterval is how often expired segments are deleted
	// (Limits.SegmentForgetAfter after their expiry). Default 5 minutes;
	// negative disables it.
	SegmentSweepInterval time.Duration
	// Reactions turns durable reactions on (§6.9; package reaction,
	// docs/reactions.md): Reactions.Planner plans reactions inside the
	// push transaction of every new commit, stored with the commit; the
	// runner Start starts delivers them to Reactions.Handlers, at least
	// once, under leases, with retries and dead letters. The store must
	// keep reactions (both drivers do). Nil: off.
	Reactions *ReactionConfig
}

// LeaseConfig configures auth leases (§7.3).
//
// Its fields: go doc github.com/syncgo/syncgo/hostapi.LeaseConfig
type LeaseConfig = hostapi.LeaseConfig

// ErrAuthorityUnavailable is what ResolveScopes returns (or wraps) when the
// host's live authority is unreachable: an outage, in which a lease, when
// leases are on, authorizes the round. Any other error fails closed.
var ErrAuthorityUnavailable = engine.ErrAuthorityUnavailable

func (c Config) withDefaults() Config {
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	if c.Now == nil {
		c.Now = func() int64 { return time.Now().UnixMilli() }
	}
	if c.MaxRequestBytes <= 0 {
		c.MaxRequestBytes = 32 << 20
	}
	if c.MaxBodyMemory == 0 {
		c.MaxBodyMemory = 256 << 20
	}
	if c.MaxBodyMemory > 0 {
		c.MaxBodyMemory = max(c.MaxBodyMemory, c.MaxRequestBytes)
	}
	if c.MaxFrameBytes <= 0 {
		c.MaxFrameBytes = 16 << 20
	}
	if c.StallTimeout <= 0 {
		c.StallTimeout = 30 * time.Second
	}
	if c.WriteTimeout <= 0 {
		c.WriteTimeout = 30 * time.Second
	}
	if c.MaxConcurrentRequests == 0 {
		c.MaxConcurrentRequests = 256
	}
	if c.MaxQueuedRequests == 0 {
		c.MaxQueuedRequests = 1024
	}
	if c.QueueTimeout <= 0 {
		c.QueueTimeout = 3 * time.Second
	}
	if c.RetentionInterval == 0 {
		c.RetentionInterval = time.Minute
	}
	if c.SegmentSweepInterval == 0 {
		c.SegmentSweepInterval = 5 * time.Minute
	}
	if c.BlobSweepInterval == 0 {
		c.BlobSweepInterval = time.Hour
	}
	if c.DisableBlobs {
		c.Blobs = nil
	} else if c.Blobs == nil {
		if bs, ok := c.Store.(store.BlobStorer); ok {
			c.Blobs = bs.BlobStore()
		}
	}
	if c.Segments == nil {
		if ss, ok := c.Store.(store.SegmentStorer); ok {
			c.Segments = ss.SegmentStore()
		}
	}
	return c
}

// releaseSpacing is the least time between two memory releases after
// bursts (Realtime.ReleaseAfterChurn); the releaser spaces them further
// when they take long (memfree).
const releaseSpacing = time.Second

// Server is a sync server: mount Handler on any mux.
type Server struct {
	cfg    Config
	eng    *engine.Engine
	hub    *realtime.Hub
	mux    *http.ServeMux
	codecs *codecPools
	// bodies keeps compressed segment bodies (segment_bodies.go).
	bodies segmentBodies
	admit  *admission
	// bodyMem bounds the request bodies held at once (MaxBodyMemory).
	bodyMem *bodyMemory
	// releaser returns free memory after bursts of connections or
	// requests (nil: Realtime.ReleaseAfterChurn turned it off).
	releaser *memfree.Releaser
	rates    *rateLimiter
	// sockets caps the open realtime sockets.
	sockets *socketLimiter
	ops     *registry // remote operations (remote.go)
	grants  *grantQueries
	watch   *watchHub // their live query watches (remote_watch.go)
	// handler is mux behind the CORS and observer middlewares.
	handler http.Handler
	metrics *metrics
	origins *originPolicy
	urls    *urlSigner // nil without Config.SignedURLs
	// blobPresign: blob downloads and grants answer signed URLs.
	blobPresign atomic.Bool
	// reactor delivers durable reactions (reactions.go); nil without
	// Config.Reactions. reactorOn: Start started it.
	reactor   *reactor.Runner
	reactorOn atomic.Bool

	// startMu serializes Start; started is set once a Start succeeded.
	// A Start that failed leaves it unset, and the next one tries again.
	startMu sync.Mutex
	started bool
	// life orders Start's launch of the background services with Stop:
	// stopped is set by Stop, and a Start that completes its migration
	// after it starts nothing. stop, done and listening are written
	// under it.
	life      sync.Mutex
	stopped   bool
	stop      context.CancelFunc
	done      chan struct{}
	listening chan struct{}
	ready     atomic.Bool
	// failed is Start's readiness error, if it failed.
	failed   atomic.Pointer[ReadinessError]
	stopping atomic.Bool
}

// New returns a Server for cfg. Call Start before serving.
func New(cfg Config) (*Server, error) {
	cfg = cfg.withDefaults()
	switch {
	case cfg.Store == nil:
		return nil, errors.New("syncgo: Config.Store is required")
	case cfg.Schema == nil:
		return nil, errors.New("syncgo: Config.Schema is required")
	case cfg.Authenticate == nil:
		return nil, errors.New("syncgo: Config.Authenticate is required")
	case cfg.ResolveScopes == nil:
		return nil, errors.New("syncgo: Config.ResolveScopes is required")
	}
	for i, w := range cfg.SchemaWindow {
		if w == nil {
			return nil, fmt.Errorf("syncgo: Config.SchemaWindow[%d] is nil", i)
		}
	}
	if err := engine.ValidateWindow(cfg.Schema, cfg.SchemaWindow); err != nil {
		return nil, fmt.Errorf("syncgo: %w", err)
	}
	mergers := crdtMergers(cfg)
	if err := checkCRDTTypes(mergers, append([]*schema.Compiled{cfg.Schema}, cfg.SchemaWindow...)...); err != nil {
		return nil, fmt.Errorf("syncgo: %w", err)
	}
	if cfg.Leases != nil && cfg.Leases.TTL <= 0 {
		return nil, errors.New("syncgo: Config.Leases.TTL must be positive")
	}
	decls := make([]store.CheckpointDeclaration, len(cfg.Declarations))
	for i, d := range cfg.Declarations {
		switch {
		case d.Partition == "" || d.Name == "":
			return nil, fmt.Errorf("syncgo: Config.Declarations[%d]: partition and name are required", i)
		case d.SchemaVersion == 0:
			d.SchemaVersion = cfg.Schema.Version()
		case d.SchemaVersion != cfg.Schema.Version():
			// Such a declaration could never cover this process's
			// checkpoint: it would refuse every request.
			return nil, fmt.Errorf("syncgo: Config.Declarations[%d] (%s/%s): schema version %d is not the running version %d",
				i, d.Partition, d.Name, d.SchemaVersion, cfg.Schema.Version())
		}
		decls[i] = d
	}
	cfg.Declarations = decls
	for table, v := range cfg.Validators {
		if _, ok := cfg.Schema.Table(table); !ok || v == nil {
			return nil, fmt.Errorf("syncgo: Config.Validators: %q is not a table of the schema, or its validator is nil", table)
		}
	}
	var releaser *memfree.Releaser
	if cfg.Realtime.ReleaseAfterChurn >= 0 {
		releaser = memfree.New(cmp.Or(cfg.Realtime.releaseSpacing, releaseSpacing), nil)
	}
	s := &Server{cfg: cfg, codecs: newCodecPools(), releaser: releaser,
		admit:   newAdmission(cfg.MaxConcurrentRequests, cfg.MaxQueuedRequests, cfg.QueueTimeout, releaser),
		bodyMem: newBodyMemory(max(cfg.MaxBodyMemory, 0)),
		rates:   newRateLimiter(cfg.RateLimit, nil),
		sockets: newSocketLimiter(cfg.Realtime.MaxSockets, cfg.Realtime.MaxSocketsPerActor)}
	ops, err := compileOperations(cfg.Operations, cfg.Schema, cfg.Store)
	if err != nil {
		return nil, fmt.Errorf("syncgo: operations: %w", err)
	}
	s.ops, s.watch = ops, newWatchHub(s)
	grants, err := compileGrants(cfg.GrantQueries, cfg.Schema, cfg.Store)
	if err != nil {
		return nil, fmt.Errorf("syncgo: %w", err)
	}
	var reresolveOn func(CommitNotice) bool
	var prepareResolve func(context.Context, map[string][]string) context.Context
	if grants != nil {
		cfg.ResolveScopes = grants.wrap(cfg.ResolveScopes)
		s.cfg.ResolveScopes = cfg.ResolveScopes
		reresolveOn, prepareResolve = grants.reads, grants.prepare
	}
	s.grants = grants
	if s.origins, err = newOriginPolicy(cfg.CORS); err != nil {
		return nil, fmt.Errorf("syncgo: %w", err)
	}
	var onPush func(wire.PushStatus, bool)
	if cfg.Metrics != nil {
		if s.metrics, err = newMetrics(cfg.Metrics); err != nil {
			return nil, fmt.Errorf("syncgo: register metrics: %w", err)
		}
		if err := cfg.Metrics.Register(newServerCollector(s)); err != nil {
			return nil, fmt.Errorf("syncgo: register metrics: %w", err)
		}
		onPush = s.metrics.pushResult
	}
	var issuer engine.URLIssuer
	if cfg.SignedURLs != nil {
		u, err := newURLSigner(cfg.SignedURLs)
		if err != nil {
			return nil, fmt.Errorf("syncgo: %w", err)
		}
		s.urls = u
		if !cfg.SignedURLs.NoSegmentURLs {
			issuer = u
		}
	}
	if ttl := cfg.SegmentStorePresignTTL; ttl > 0 {
		p, ok := cfg.Segments.(store.SegmentPresigner)
		if !ok {
			return nil, errors.New("syncgo: Config.SegmentStorePresignTTL needs Config.Segments that presigns (store.SegmentPresigner)")
		}
		if ttl > 15*time.Minute {
			return nil, errors.New("syncgo: Config.SegmentStorePresignTTL exceeds 15 minutes (§5.4)")
		}
		issuer = segmentPresignIssuer{p: p, ttl: ttl}
	}
	if err := s.initReactions(); err != nil {
		return nil, fmt.Errorf("syncgo: %w", err)
	}
	s.eng = engine.New(engine.Config{
		URLs:     issuer,
		Blobs:    cfg.Blobs,
		Store:    cfg.Store,
		Schema:   cfg.Schema,
		Resolve:  engine.ScopeResolver(cfg.ResolveScopes),
		Now:      cfg.Now,
		OnCommit: s.onCommit,

		OnPushResult: onPush,
		OnResolve: func(ctx context.Context, a engine.Auth, clientID string, allowed map[string][]string, ok bool, started time.Time) {
			s.hub.OnResolve(ctx, a, clientID, allowed, ok, started)
		},
		Logger:   cfg.Logger,
		Limits:   cfg.Limits,
		Segments: cfg.Segments,
		// Segments are stored as their zstd download bodies where the
		// segment store keeps bodies (pgstore, sqlitestore): the store
		// writes a few percent of the bytes, and the downloads serve the
		// body this compression put in s.bodies.
		EncodeSegment: s.encodeSegment,
		// A catch-up's next window is encoded and compressed while it is
		// read ahead (internal/engine/precompress.go).
		CompressBody: s.compressBody,

		Declarations: cfg.Declarations,
		Window:       cfg.SchemaWindow,
		CRDTMergers:  mergers,

		Validators:      cfg.Validators,
		CommitValidator: cfg.CommitValidator,
		Leases:          cfg.Leases,
		Reactions:       s.cfg.Reactions,
		OnReactions:     s.wakeReactions,
	})
	rc := cfg.Realtime
	s.hub = realtime.NewHub(realtime.Config{Engine: s.eng, Store: cfg.Store, Logger: cfg.Logger, Now: cfg.Now,
		Heartbeat: rc.Heartbeat, QueueMessages: rc.QueueMessages, QueueBytes: rc.QueueBytes,
		WriteTimeout: rc.WriteTimeout, MaxMessageBytes: cfg.MaxRequestBytes, StallTimeout: cfg.StallTimeout,
		MaxDeltaBytes: rc.MaxDeltaBytes, MaxPresenceBytes: rc.MaxPresenceBytes,
		ReresolveInterval: rc.ReresolveInterval, ReresolveOn: reresolveOn, PrepareResolve: prepareResolve,
		ReleaseAfterChurn: rc.ReleaseAfterChurn, Releaser: releaser, Admit: s.admitRound, Bodies: s.realtimeBodies()})
	s.mux = http.NewServeMux()
	s.mux.HandleFunc("POST /sync", s.readyOnly("sync", s.handleSync))
	s.mux.HandleFunc("GET /segments/{segmentId}", s.readyOnly("segments", s.handleSegment))
	s.mux.HandleFunc("GET /realtime", s.readyOnly("realtime", s.handleRealtime))
	s.mux.HandleFunc("POST /commits", s.readyOnly("commits", s.handleJSONCommits))
	s.mux.HandleFunc("POST /operations", s.readyOnly("operations", s.handleOperation))
	s.mux.HandleFunc("GET /operations/realtime", s.readyOnly("operations", s.handleWatchSocket))
	s.mux.HandleFunc("PUT /blobs/{blobId}", s.readyOnly("blobs", s.handleBlobPut))
	s.mux.HandleFunc("GET /blobs/{blobId}", s.readyOnly("blobs", s.handleBlobGet))
	s.mux.HandleFunc("POST /blobs/{blobId}/upload-grant", s.readyOnly("blobs", s.handleBlobGrant))
	if cfg.BlobPresign {
		if s.urls == nil {
			return nil, errors.New("syncgo: Config.BlobPresign needs Config.SignedURLs")
		}
		s.blobPresign.Store(true)
	}
	if cfg.BlobStorePresignTTL > 0 {
		if _, ok := s.eng.Blobs().(store.BlobPresigner); !ok {
			return nil, errors.New("syncgo: Config.BlobStorePresignTTL needs a blob store that presigns (store.BlobPresigner)")
		}
	}
	s.handler = s.mux
	if s.origins != nil {
		s.handler = s.origins.wrap(s.handler, s)
	}
	if s.metrics != nil || cfg.AccessLog != nil || cfg.TracerProvider != nil {
		s.handler = &observer{next: s.handler, metrics: s.metrics, log: cfg.AccessLog, tracer: newRequestTracer(cfg.TracerProvider)}
	}
	return s, nil
}

// Start prepares the storage for the schema (creating or checking its
// tables) and starts the background services (retention). It is safe to
// call more than once: after a success it does nothing; after a failure
// (a *ReadinessError, such as a database that did not answer while the
// host booted) the next call prepares the storage again, so a host may
// retry Start on the same Server. After Stop, Start starts nothing and
// returns a *ReadinessError in phase PhaseStopping.
func (s *Server) Start(ctx context.Context) error {
	s.startMu.Lock()
	defer s.startMu.Unlock()
	if err := s.stoppedError(); err != nil {
		return err
	}
	if s.started {
		return nil
	}
	var err error
	if b, ok := s.cfg.Store.(store.Barrier); ok {
		err = b.EnsureSchemaWith(ctx, s.cfg.Schema, s.cfg.Declarations)
	} else {
		err = s.cfg.Store.EnsureSchema(ctx, s.cfg.Schema)
	}
	if err != nil {
		re := &ReadinessError{Phase: readinessPhase(err), Err: err}
		s.failed.Store(re)
		return re
	}
	s.life.Lock()
	defer s.life.Unlock()
	if s.stopped {
		// Stop ran while the storage was prepared: nothing may
		// start now that nobody would stop.
		return s.stoppedErrorLocked()
	}
	s.started = true
	s.failed.Store(nil)
	s.ready.Store(true)
	bg, cancel := context.WithCancel(context.WithoutCancel(ctx))
	s.stop, s.done = cancel, make(chan struct{})
	var services sync.WaitGroup
	if s.cfg.RetentionInterval > 0 {
		services.Go(func() { s.eng.RunRetention(bg, s.cfg.RetentionInterval, s.cfg.Retention) })
	}
	if s.cfg.SegmentSweepInterval > 0 {
		services.Go(func() { s.eng.RunSegmentSweeps(bg, s.cfg.SegmentSweepInterval) })
	}
	if s.cfg.BlobSweepInterval > 0 && s.cfg.Blobs != nil {
		services.Go(func() { s.eng.RunBlobSweeps(bg, s.cfg.BlobSweepInterval) })
	}
	go func() {
		defer close(s.done)
		services.Wait()
	}()
	s.watch.start(bg)
	s.startReactions()
	if l, ok := s.cfg.Store.(store.CommitListener); ok {
		s.listening = make(chan struct{})
		go func() {
			defer close(s.listening)
			if err := s.hub.Listen(bg, l); err != nil && bg.Err() == nil {
				s.cfg.Logger.Error("commit listener stopped", "err", err)
			}
		}()
	}
	return nil
}

// stoppedError is Start's error once Stop was called, or nil; s.startMu
// is held.
func (s *Server) stoppedError() error {
	s.life.Lock()
	defer s.life.Unlock()
	if !s.stopped {
		return nil
	}
	return s.stoppedErrorLocked()
}

// stoppedErrorLocked returns Start's error after Stop, and records it as
// the readiness error of a server that never started; s.startMu and
// s.life are held.
func (s *Server) stoppedErrorLocked() error {
	if s.started {
		return &ReadinessError{Phase: PhaseStopping, Err: errors.New("syncgo: Stop was called")}
	}
	re := &ReadinessError{Phase: PhaseStopping, Err: errors.New("syncgo: Stop was called before Start completed")}
	s.failed.Store(re)
	return re
}

// onCommit fans a durable commit out to the realtime sockets and the
// host's hook.
func (s *Server) onCommit(n CommitNotice) {
	s.hub.Notify(n)
	s.watch.notify(n)
	if s.cfg.OnCommit != nil {
		s.cfg.OnCommit(n)
	}
}

// Drain turns the readiness report (/readyz, CheckReady) to "stopping"
// while the server goes on serving: a load balancer that follows it stops
// sending new clients here before Stop closes the sockets. Stop after it.
// While draining, each answer but a socket upgrade closes its connection
// (Connection: close), so that clients move to new connections before
// the listener's stop closes the idle ones.
func (s *Server) Drain() { s.stopping.Store(true) }

// Stop closes the realtime sockets with a going-away close frame, stops
// the background services and waits for them, or for ctx. From Stop on,
// Ready is false and the handler refuses new requests and upgrades with
// sync.schema_not_ready (503, phase stopping); requests already under
// way finish. The reaction
// runner claims no more and its running handlers finish; when ctx ends
// first, their contexts are cancelled and their leases given back (Stop
// waits up to 5 s more for those releases). The store stays open; its
// owner closes it. A Start still preparing the storage when Stop is
// called (or called after it) starts nothing and returns a
// *ReadinessError in phase PhaseStopping.
func (s *Server) Stop(ctx context.Context) error {
	s.stopping.Store(true)
	defer s.eng.StopReadAhead() // its reads use the store, which the host closes next
	s.hub.Close()
	s.releaser.Close()
	s.watch.close()
	s.life.Lock()
	s.stopped = true
	stop, done, listening := s.stop, s.done, s.listening
	// Requests from now on are refused as not ready (503, retryable
	// elsewhere), not served on a store its owner closes next.
	s.failed.Store(&ReadinessError{Phase: PhaseStopping, Err: errors.New("syncgo: Stop was called")})
	s.ready.Store(false)
	s.life.Unlock()
	if stop != nil {
		// The background services wind down while the reaction
		// handlers finish.
		stop()
	}
	rerr := s.stopReactions(ctx)
	if stop == nil {
		return rerr
	}
	for _, ch := range []chan struct{}{done, listening} {
		if ch == nil {
			continue
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return rerr
}

// Prune runs one retention pass on a partition now and returns its
// horizon. The policy's values below the §4.6 floors are raised to them.
func (s *Server) Prune(ctx context.Context, partition string, policy RetentionPolicy) (int64, error) {
	return s.eng.Prune(ctx, partition, policy)
}

// PrunePushResults prunes the whole push-result journal now, in the
// batches the retention rounds use, deleting the records older than
// policy.PushResultsMaxAge (raised to the policy's active window, itself
// raised to its floor); it returns how many it deleted. A zero
// PushResultsMaxAge deletes nothing. On Postgres it stops early, without
// an error, while another process is pruning the journal.
func (s *Server) PrunePushResults(ctx context.Context, policy RetentionPolicy) (int64, error) {
	return s.eng.PrunePushResults(ctx, policy)
}

// readyOnly answers sync.schema_not_ready until Start has succeeded.
func (s *Server) readyOnly(route string, h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if !s.ready.Load() {
			var err error
			if re := s.failed.Load(); re != nil {
				err = re
			}
			s.writeError(w, route, notReadyError(err))
			return
		}
		if s.stopping.Load() && r.Header.Get("Upgrade") == "" {
			// Draining: the connection closes after this answer, so the
			// client's next request opens a new one (which a load
			// balancer sends elsewhere) instead of racing the stop's
			// close of idle connections, where a request sent as the
			// connection closes fails with a reset or an EOF. HTTP/2
			// answers it with a GOAWAY. Socket upgrades go on as they
			// are.
			w.Header().Set("Connection", "close")
		}
		h(w, r)
	}
}

// Ready reports whether Start succeeded and the server serves.
func (s *Server) Ready() bool { return s.ready.Load() }

// Handler returns the protocol routes relative to the mount point: POST
// /sync, GET /segments/{segmentId}, GET /realtime, POST /commits, POST
// /operations, GET /operations/realtime and the blob routes (PUT and GET
// /blobs/{blobId}, POST /blobs/{blobId}/upload-grant), with the CORS
// answers, access log and request metrics that Config asks for. Mount it
// with http.StripPrefix, for example
// mux.Handle("/api/sync/", http.StripPrefix("/api/sync", srv.Handler())).
// The probes are separate handlers (HealthzHandler, ReadyzHandler). Until
// Start succeeds and from Stop on, every route answers 503
// sync.schema_not_ready. The WebSocket routes need a ResponseWriter that
// can be hijacked (http.Hijacker, or one that unwraps to it, as
// http.ResponseController does): behind a middleware that hides it, such
// as http.TimeoutHandler, an upgrade is refused with sync.internal_error
// (500) and reported to OnError.
func (s *Server) Handler() http.Handler { return s.handler }

// authenticate runs the host hook and maps its failure to the catalog.
func (s *Server) authenticate(r *http.Request) (Auth, *syncerr.Error) {
	a, err := s.cfg.Authenticate(r)
	if err != nil {
		if pe := syncerr.As(err); pe != nil {
			return Auth{}, pe
		}
		return Auth{}, syncerr.Wrap(syncerr.CodeAuthRequired, "authentication required", err)
	}
	// The identity is stored with every commit and sent back in COMMIT
	// frames: one the wire or a driver cannot carry (not UTF-8, NUL,
	// overlong) would poison every pull of the commits it writes, so it
	// is refused here, whatever the host's Authenticate returned.
	for _, f := range [...]struct{ what, v string }{{"actor id", a.ActorID}, {"partition", a.Partition}} {
		if p := engine.IdentifierProblem(f.v); p != "" {
			if f.v != "" {
				s.cfg.Logger.Warn("authentication refused: Authenticate returned an unusable "+f.what, "problem", p)
			}
			return Auth{}, syncerr.New(syncerr.CodeAuthRequired, "authentication required")
		}
	}
	return a, nil
}

// SweepSegments runs one sweep of the segment store now: publications that
// expired more than Limits.SegmentForgetAfter ago are deleted, and the
// segments left without any.
func (s *Server) SweepSegments(ctx context.Context) (store.SegmentSweep, error) {
	return s.eng.SweepSegments(ctx)
}

// SweepBlobs runs one sweep of the blob store now: blobs uploaded more
// than Limits.BlobGracePeriod ago that no row references are deleted, and
// what interrupted uploads left behind as long ago.
func (s *Server) SweepBlobs(ctx context.Context) (BlobSweep, error) {
	return s.eng.SweepBlobs(ctx)
}

// BlobSweep reports a sweep of the blob store.
//
// Its fields: go doc github.com/syncgo/syncgo/hostapi.BlobSweep
type BlobSweep = hostapi.BlobSweep
