package conformance

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/syncgo/syncgo"
	"github.com/syncgo/syncgo/internal/engine"
	"github.com/syncgo/syncgo/schema"
	"github.com/syncgo/syncgo/wire"
)

// createRequest is the body of POST /__conformance/instances.
type createRequest struct {
	Schema    json.RawMessage `json:"schema"`
	Partition string          `json:"partition"`
	NowMs     *int64          `json:"nowMs"`
	Limits    *createLimits   `json:"limits"`
	// SignedURLs turns signed segment URLs on, minted on the harness's
	// own loopback origin.
	SignedURLs *createSignedURLs `json:"signedUrls"`
	// Leases turns auth leases on (§7.3).
	Leases *struct {
		TTLMs int64 `json:"ttlMs"`
	} `json:"leases"`
}

// createSignedURLs is the signedUrls option of an instance.
type createSignedURLs struct {
	TTLSeconds *int64 `json:"ttlSeconds"`
}

// createLimits are the instance limits; absent fields (nil) take the
// server defaults, and an explicit 0 is a value of its own.
type createLimits struct {
	MaxOperationsPerRequest       *int   `json:"maxOperationsPerRequest"`
	InlineSegmentMaxBytes         *int   `json:"inlineSegmentMaxBytes"`
	SegmentTTLMs                  *int64 `json:"segmentTtlMs"`
	MaxCascadeOperationsPerCommit *int   `json:"maxCascadeOperationsPerCommit"`
	MaxDeltaBytes                 *int   `json:"maxDeltaBytes"`
	MaxPresenceBytes              *int   `json:"maxPresenceBytes"`
}

// serverLimits maps the instance limits onto the server's: an explicit
// inlineSegmentMaxBytes of 0 means "never inline"; an explicit 0 for the
// others (which a server cannot run with) is refused.
func (l *createLimits) serverLimits() (syncgo.Limits, syncgo.RealtimeConfig, error) {
	var limits syncgo.Limits
	var rt syncgo.RealtimeConfig
	if l == nil {
		return limits, rt, nil
	}
	positive := func(name string, v *int, dst *int) error {
		if v == nil {
			return nil
		}
		if *v <= 0 {
			return fmt.Errorf("limits.%s must be positive, got %d", name, *v)
		}
		*dst = *v
		return nil
	}
	if err := positive("maxOperationsPerRequest", l.MaxOperationsPerRequest, &limits.MaxOperationsPerRequest); err != nil {
		return limits, rt, err
	}
	if err := positive("maxCascadeOperationsPerCommit", l.MaxCascadeOperationsPerCommit, &limits.MaxCascadeOperations); err != nil {
		return limits, rt, err
	}
	if err := positive("maxDeltaBytes", l.MaxDeltaBytes, &rt.MaxDeltaBytes); err != nil {
		return limits, rt, err
	}
	if err := positive("maxPresenceBytes", l.MaxPresenceBytes, &rt.MaxPresenceBytes); err != nil {
		return limits, rt, err
	}
	if v := l.InlineSegmentMaxBytes; v != nil {
		switch {
		case *v < 0:
			return limits, rt, fmt.Errorf("limits.inlineSegmentMaxBytes must not be negative, got %d", *v)
		case *v == 0:
			limits.InlineSegmentMaxBytes = syncgo.NeverInline
		default:
			limits.InlineSegmentMaxBytes = *v
		}
	}
	if v := l.SegmentTTLMs; v != nil {
		if *v <= 0 {
			return limits, rt, fmt.Errorf("limits.segmentTtlMs must be positive, got %d", *v)
		}
		limits.SegmentTTL = time.Duration(*v) * time.Millisecond
	}
	return limits, rt, nil
}

// instance is one throw-away server: its own storage, virtual clock,
// scope table and syncgo.Server.
type instance struct {
	id        string
	mount     string
	partition string
	schema    *schema.Compiled
	logger    *slog.Logger
	store     *instanceStore
	srv       *syncgo.Server
	handler   http.Handler
	// pruner runs the retention passes of the prune call: an engine over
	// the same store and clock, used for nothing else. (Server.Prune raises
	// the policy to the §4.6 floors, which scenarios on a virtual clock
	// and a short log need lowered.)
	pruner *engine.Engine
	nowMs  atomic.Int64
	// signedURLs reports that the instance mints signed segment URLs.
	signedURLs bool

	mu              sync.Mutex
	allowed         map[string]map[string][]string
	resolverFailing bool

	resolverOutage bool // setResolverOutage: leases decide

	rules rules // installValidators, installCommitValidator

	dbs        databases  // where the instance's databases live
	backupMu   sync.Mutex // serializes captureBackup and restoreBackup
	backupName string     // empty until captureBackup

	closeOnce sync.Once
	closeErr  error
}

// newInstance builds and starts an instance. On failure it returns the
// HTTP status to answer with.
func newInstance(ctx context.Context, id, origin string, req createRequest, dbs func(*schema.Compiled, *slog.Logger) (databases, error), logger *slog.Logger) (*instance, int, error) {
	if len(req.Schema) == 0 || string(req.Schema) == "null" {
		return nil, http.StatusBadRequest, errors.New("schema is required")
	}
	ir, err := schema.ParseJSON(req.Schema)
	if err != nil {
		return nil, http.StatusBadRequest, fmt.Errorf("schema: %w", err)
	}
	fillHarnessDefaults(ir)
	sc, err := schema.Compile(ir)
	if err != nil {
		return nil, http.StatusBadRequest, fmt.Errorf("schema: %s", strings.ReplaceAll(err.Error(), "\n", "; "))
	}
	if req.Partition == "" {
		return nil, http.StatusBadRequest, errors.New("partition is required")
	}
	var leases *syncgo.LeaseConfig
	if req.Leases != nil {
		if req.Leases.TTLMs <= 0 {
			return nil, http.StatusBadRequest, errors.New("leases.ttlMs must be positive")
		}
		leases = &syncgo.LeaseConfig{TTL: time.Duration(req.Leases.TTLMs) * time.Millisecond}
	}
	in := &instance{id: id, mount: "/i/" + id, partition: req.Partition, schema: sc, logger: logger,
		allowed: map[string]map[string][]string{}}
	if req.NowMs != nil {
		in.nowMs.Store(*req.NowMs)
	} else {
		in.nowMs.Store(time.Now().UnixMilli())
	}
	if in.dbs, err = dbs(sc, logger); err != nil {
		return nil, http.StatusInternalServerError, err
	}
	st, err := in.dbs.open(ctx, "")
	if err != nil {
		in.dbs.remove()
		return nil, http.StatusInternalServerError, err
	}
	in.store = newInstanceStore(st)
	limits, rt, err := req.Limits.serverLimits()
	if err != nil {
		in.store.Close()
		in.dbs.remove()
		return nil, http.StatusBadRequest, err
	}
	signed, err := req.SignedURLs.config(origin + in.mount)
	if err != nil {
		in.store.Close()
		in.dbs.remove()
		return nil, http.StatusBadRequest, err
	}
	in.signedURLs = signed != nil
	// Presigned blob transfers (setBlobPresign) are minted with the same
	// kind of key on the same origin, whether or not segment URLs are on.
	if signed == nil {
		if signed, err = (&createSignedURLs{}).config(origin + in.mount); err != nil {
			in.store.Close()
			in.dbs.remove()
			return nil, http.StatusInternalServerError, err
		}
		signed.NoSegmentURLs = true
	}
	in.srv, err = syncgo.New(syncgo.Config{
		SignedURLs:    signed,
		Store:         in.store,
		Schema:        sc,
		Authenticate:  in.authenticate,
		ResolveScopes: in.resolveScopes,
		Logger:        logger,
		Now:           in.nowMs.Load,
		Limits:        limits,
		Realtime:      rt,
		// Retention runs only when the harness calls prune.
		RetentionInterval: -1,
		Validators:        in.rules.validators(tableNames(sc)),
		CommitValidator:   in.rules.commitValidator,
		Leases:            leases,
	})
	if err == nil {
		if o := req.SignedURLs; o != nil && o.TTLSeconds != nil && *o.TTLSeconds == 0 {
			// Born-expired URLs (a zero TTL in Config means the default).
			in.srv.SetSignedURLTTL(0)
		}
		err = in.srv.Start(ctx)
	}
	if err != nil {
		in.close()
		return nil, http.StatusInternalServerError, err
	}
	in.pruner = engine.New(engine.Config{Store: in.store, Schema: sc, Now: in.nowMs.Load, Logger: logger})
	in.handler = http.StripPrefix(in.mount, in.srv.Handler())
	return in, http.StatusOK, nil
}

// fillHarnessDefaults applies what the harness's schema leaves to the
// server driver, as the reference driver does: a crdt column without a
// crdtType merges as yjs-doc, and a declared reference gets the
// single-column index typegen would emit for it (§6.11) unless the table
// declares one.
func fillHarnessDefaults(ir *schema.Schema) {
	for i := range ir.Tables {
		t := &ir.Tables[i]
		for j := range t.Columns {
			if c := &t.Columns[j]; c.Type == wire.TypeCRDT && c.CRDTType == "" {
				c.CRDTType = schema.CRDTYjsDoc
			}
		}
		for _, ref := range t.References {
			indexed := slices.ContainsFunc(t.Indexes, func(ix schema.Index) bool {
				return len(ix.Columns) == 1 && ix.Columns[0] == ref.Column
			})
			if !indexed {
				t.Indexes = append(t.Indexes, schema.Index{Name: "idx_" + t.Name + "_" + ref.Column + "_ref",
					Columns: []string{ref.Column}})
			}
		}
	}
}

// authenticate trusts "Authorization: Bearer <actorId>"; the partition is
// the instance's.
func (in *instance) authenticate(r *http.Request) (syncgo.Auth, error) {
	token, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	actor := strings.TrimSpace(token)
	if !ok || actor == "" {
		return syncgo.Auth{}, errors.New("missing bearer token")
	}
	return syncgo.Auth{ActorID: actor, Partition: in.partition}, nil
}

// resolveScopes answers from the setAllowedScopes table: an actor never
// set has no scopes; setResolverFailing makes every call fail.
func (in *instance) resolveScopes(_ context.Context, req syncgo.ScopeRequest) (map[string][]string, error) {
	in.mu.Lock()
	defer in.mu.Unlock()
	if in.resolverFailing {
		return nil, errors.New("conformance: injected scope resolver failure")
	}
	if in.resolverOutage {
		return nil, fmt.Errorf("conformance: injected authority outage: %w", syncgo.ErrAuthorityUnavailable)
	}
	out := make(map[string][]string, len(in.allowed[req.ActorID]))
	for k, v := range in.allowed[req.ActorID] {
		out[k] = slices.Clone(v)
	}
	return out, nil
}

func (in *instance) setAllowed(actor string, allowed map[string][]string) {
	in.mu.Lock()
	defer in.mu.Unlock()
	in.allowed[actor] = maps.Clone(allowed)
}

func (in *instance) setResolverFailing(failing bool) {
	in.mu.Lock()
	defer in.mu.Unlock()
	in.resolverFailing = failing
}

// close stops the server (and with it, once realtime lands, its sockets),
// closes every database the instance opened and removes their files.
func (in *instance) close() error {
	in.closeOnce.Do(func() {
		var errs []error
		if in.srv != nil {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			errs = append(errs, in.srv.Stop(ctx))
			cancel()
		}
		if in.store != nil {
			errs = append(errs, in.store.closeAll())
		}
		if in.dbs != nil {
			errs = append(errs, in.dbs.remove())
		}
		in.closeErr = errors.Join(errs...)
	})
	return in.closeErr
}

func tableNames(sc *schema.Compiled) []string {
	var out []string
	for _, t := range sc.Tables() {
		out = append(out, t.Name())
	}
	return out
}

// config returns the server's signed-URL configuration for an instance
// mounted at base: a random key of its own, the requested TTL (default
// 900 s). Nil options turn signed URLs off.
func (o *createSignedURLs) config(base string) (*syncgo.SignedURLConfig, error) {
	if o == nil {
		return nil, nil
	}
	key := make([]byte, 32)
	if _, err := rand.Read(key); err != nil {
		return nil, err
	}
	c := &syncgo.SignedURLConfig{Key: key, BaseURL: base, TTL: 900 * time.Second}
	if o.TTLSeconds != nil {
		if *o.TTLSeconds < 0 {
			return nil, fmt.Errorf("signedUrls.ttlSeconds must not be negative, got %d", *o.TTLSeconds)
		}
		c.TTL = time.Duration(*o.TTLSeconds) * time.Second
	}
	return c, nil
}
