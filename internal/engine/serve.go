package engine

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/syncgo/syncgo/schema"
	"github.com/syncgo/syncgo/store"
	"github.com/syncgo/syncgo/syncerr"
	"github.com/syncgo/syncgo/wire"
)

// Responder starts the response of a request: it commits the transport to
// a successful response (HTTP 200, or a socket round's first chunk) and
// returns the encoder frames are written to.
type Responder interface {
	Begin(version uint16) (*wire.Encoder, error)
}

// reservedClientPrefix is the server-command client-id namespace (§1.5).
const reservedClientPrefix = `["remote-command",`

func randomEpoch() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// request is the state of one request while it is served.
type request struct {
	e         *Engine
	auth      Auth
	req       *wire.Request
	partition store.Partition
	client    *store.ClientRecord // nil when the client is new
	allowed   map[string][]string
	resolveOK bool
	// resolveStarted is when the scope resolution began.
	resolveStarted time.Time
	lease          *wire.Lease // the LEASE frame to send (§7.3.2)
	enc            *wire.Encoder
	pulled         []subOutcome
	gate           *store.ServeGate // the serve gate read at entry
	gw             *gateWriter
	cs             *schema.Compiled // the schema version the client speaks
	lastSeq        int64            // the newest commitSeq a push of this request answered
	// savedSubs is the store.SubscriptionsDigest of the subscription list
	// a pull recorded for the client (Outcome.SubscriptionsDigest).
	savedSubs uint64
	// pre is the request state read with the partition at entry (the
	// serve gate and client record); nil when they are read one by one.
	pre *store.RequestState
	// gateAfterReads is a serve gate read after the last data this
	// response holds (recheck); the next read-verify uses it instead of
	// reading the gate again. Any section clears it before it reads.
	gateAfterReads *store.ServeGate
	// enteredAt is when the request began its entry reads (the partition
	// and the serve gate), for a window read ahead (readahead.go).
	enteredAt time.Time
	// resp is the transport's responder.
	resp Responder
	// preBody is the body compressed ahead this response ends with, when
	// its section chose it (precompress.go).
	preBody *preBody
	// build makes the operations of a server command (command.go).
	build func(ctx context.Context, tx store.WriteTx) ([]wire.Operation, error)
}

// tables returns a table of the client's schema and of the current one.
func (r *request) tables(name string) (client, current *schema.CompiledTable, ok bool) {
	client, ok = r.cs.Table(name)
	if !ok {
		return nil, nil, false
	}
	current, ok = r.e.cfg.Schema.Table(name)
	return client, current, ok
}

// old reports whether the client speaks an older schema than the current.
func (r *request) old() bool { return r.cs != r.e.cfg.Schema }

// Serve answers one request. A failure before the response began is
// returned as a *syncerr.Error for the transport to render (HTTP JSON); once
// the response began, a failure is written in-band as an ERROR frame and
// the returned error only reports it for logging.
func (e *Engine) Serve(ctx context.Context, auth Auth, req *wire.Request, resp Responder) error {
	_, err := e.ServeRound(ctx, auth, req, resp)
	return err
}

// Outcome is what a completed request did, for the realtime binding: the
// subscriptions of its pull, to register on the socket that ran it.
type Outcome struct {
	// Completed is set when the response ended without an ERROR frame.
	Completed bool
	// Pulled is set when the request carried a PULL_HEADER.
	Pulled bool
	// Subscriptions are the pull's subscriptions in request order; only
	// active ones carry effective scopes.
	Subscriptions []SubscriptionOutcome
	// LogEpoch is the partition's log epoch the request was served under.
	LogEpoch string
	// SchemaVersion is the schema version the client spoke.
	SchemaVersion int32
	// SubscriptionsDigest is the store.SubscriptionsDigest of the
	// subscription list a pull recorded for the client: the list a socket
	// that registers the pull's subscriptions acks for
	// (store.CursorAdvance.Subscriptions).
	SubscriptionsDigest uint64
}

// SubscriptionOutcome is one subscription of a completed pull.
type SubscriptionOutcome struct {
	ID        string
	Table     string
	Active    bool
	Effective wire.ScopeMap
}

// ServeRound is Serve, also reporting the request's Outcome.
func (e *Engine) ServeRound(ctx context.Context, auth Auth, req *wire.Request, resp Responder) (Outcome, error) {
	r := &request{e: e, auth: auth, req: req, resp: resp, enteredAt: time.Now()}
	early, err := r.plan(ctx)
	if err != nil {
		return Outcome{}, asProtocolError(err)
	}
	enc, err := r.begin(ctx, resp)
	if err != nil {
		return Outcome{}, err
	}
	r.enc = enc
	out := Outcome{LogEpoch: r.partition.LogEpoch}
	if early != nil {
		if err := enc.Encode(early); err != nil {
			return out, r.preStream(err)
		}
		return out, r.preStream(enc.Close())
	}
	err = r.serve(ctx)
	if err == nil {
		err = r.close()
	}
	if err != nil {
		r.explainByGate(err)
		if pre := r.preStream(err); pre != err || !r.started() {
			return out, pre
		}
		perr := asProtocolError(err)
		if r.gw != nil && r.gw.refusal != nil {
			perr = asProtocolError(r.gw.refusal)
		}
		if r.gw != nil && r.gw.refusal != nil {
			err = perr // the gate explains the failure: not an internal error
		}
		if werr := r.abort(perr); werr != nil {
			return out, errors.Join(err, werr)
		}
		return out, err
	}
	out.Completed = true
	out.SchemaVersion = r.cs.Version()
	if req.Pull != nil {
		out.Pulled = true
		out.SubscriptionsDigest = r.savedSubs
		out.Subscriptions = make([]SubscriptionOutcome, len(req.Subscriptions))
		for i, sub := range req.Subscriptions {
			so := SubscriptionOutcome{ID: sub.ID, Table: sub.Table, Active: r.pulled[i].active}
			if so.Active {
				so.Effective = r.pulled[i].effective
			}
			out.Subscriptions[i] = so
		}
	}
	return out, nil
}

// PartitionEpoch returns a partition's current log epoch (for responses
// the engine did not produce, such as a socket round's decode failure).
func (e *Engine) PartitionEpoch(ctx context.Context, partition string) string {
	p, err := e.cfg.Store.Partition(ctx, partition)
	if err != nil {
		return ""
	}
	return p.LogEpoch
}

// ResolveAllowed runs the host's scope resolver for an actor; during an
// outage (ErrAuthorityUnavailable) with leases on, the client's stored
// lease decides (§7.3.3).
func (e *Engine) ResolveAllowed(ctx context.Context, auth Auth, clientID string) (map[string][]string, error) {
	if e.cfg.Resolve == nil {
		return nil, syncerr.New(syncerr.CodeForbidden, "no scope resolver")
	}
	allowed, err := e.cfg.Resolve(ctx, ScopeRequest{Partition: auth.Partition, ActorID: auth.ActorID, ClientID: clientID})
	if err != nil && e.cfg.Leases != nil && errors.Is(err, ErrAuthorityUnavailable) {
		return e.leaseAllowed(ctx, auth, clientID)
	}
	return allowed, err
}

// EffectiveScopes computes a subscription's effective scopes (§3.2).
func EffectiveScopes(requested wire.ScopeMap, allowed map[string][]string, resolved bool) (wire.ScopeMap, bool) {
	return effectiveScopes(requested, allowed, resolved)
}

// asProtocolError keeps catalog errors and hides everything else behind
// sync.internal_error (§10.2).
func asProtocolError(err error) *syncerr.Error {
	if pe := syncerr.As(err); pe != nil {
		return pe
	}
	if errors.Is(err, store.ErrStorageFull) {
		return &syncerr.Error{Code: syncerr.CodeInternalError, Message: "the server's storage is full; retry later",
			HTTPStatus: http.StatusServiceUnavailable, Err: err}
	}
	if code := wire.ErrorCode(err); code != "" {
		return syncerr.Wrap(code, err.Error(), err)
	}
	return syncerr.Internal(err)
}

// begin starts the response: through a gate writer when the transport can
// hold its commit back and the store has the barrier, directly otherwise.
// A push-only response is held back but not verified: what it carries was
// read in the push transaction, after that transaction's own gate check.
func (r *request) begin(ctx context.Context, resp Responder) (*wire.Encoder, error) {
	sr, ok := resp.(StreamResponder)
	if !ok || r.gate == nil {
		return resp.Begin(r.req.Version)
	}
	r.gw = &gateWriter{r: r, ctx: ctx, begin: func() (io.Writer, error) { return sr.BeginStream(r.req.Version) },
		bypass: r.req.Pull == nil}
	return wire.NewEncoder(r.gw, wire.KindResponse, r.req.Version)
}

// explainByGate runs the read-verify once more when serving failed with
// anything but a protocol error: rows read after a concurrent migration
// may not decode under the running layout, and the client must then get
// sync.schema_not_ready (retry later), not sync.internal_error.
func (r *request) explainByGate(err error) {
	if r.gw == nil || r.gw.refusal != nil || syncerr.As(err) != nil {
		return
	}
	if v := r.gw.verify(); v != nil && syncerr.As(v) != nil {
		r.gw.refusal = v
	}
}

// started reports whether response bytes reached the transport.
func (r *request) started() bool { return r.gw == nil || r.gw.w != nil }

// preStream turns a serve-gate refusal found before any byte was released
// into a request-level error (HTTP JSON); other errors pass through.
func (r *request) preStream(err error) error {
	if err == nil || r.gw == nil || r.gw.w != nil {
		return err
	}
	if r.gw.refusal != nil {
		return asProtocolError(r.gw.refusal)
	}
	return asProtocolError(err)
}

// abort ends a started response with an ERROR frame, past the gate. The
// frames buffered so far go out first, unless the gate refused them (they
// may hold reads made after the gate changed) or a section's commits are
// in a body compressed ahead that was not sent.
func (r *request) abort(pe *syncerr.Error) error {
	discard := r.preBody != nil // its section's frames are in the body
	if r.gw != nil {
		r.gw.bypass = true
		discard = discard || r.gw.refusal != nil
	}
	return writeErrorFrame(r.enc, pe, discard)
}

func writeErrorFrame(enc *wire.Encoder, pe *syncerr.Error, discard bool) error {
	ent := pe.Entry()
	f := &wire.ErrorFrame{
		Code:              pe.Code,
		Message:           pe.Message,
		Category:          ent.Category,
		Retryable:         ent.Retryable,
		RecommendedAction: ent.Action,
	}
	if len(pe.Details) > 0 {
		d := string(pe.Details)
		f.Details = &d
	}
	if !discard && enc.Encode(f) == nil {
		return enc.Close()
	}
	return enc.Abort(f)
}

// plan runs the request-level checks (§1.7) in the reference order. It
// returns a header-only response (schema floor or epoch reset) when the
// request must end after RESP_HEADER.
func (r *request) plan(ctx context.Context) (*wire.RespHeader, error) {
	e, req := r.e, r.req
	h := req.Header
	if strings.HasPrefix(h.ClientID, reservedClientPrefix) {
		return nil, syncerr.New(syncerr.CodeInvalidClientID, "clientId uses the reserved server-command namespace")
	}
	if err := checkRequestInput(req); err != nil {
		return nil, err
	}
	p, pre, err := e.touchPartitionFor(ctx, r.auth.Partition, h.ClientID)
	if err != nil {
		return nil, err
	}
	r.partition, r.pre = p, pre
	if err := r.entryGate(ctx); err != nil {
		return nil, err
	}
	if req.Version == wire.Version1 && p.EpochRequired {
		return nil, syncerr.New(syncerr.CodeClientWireUnsupported, "this partition requires a log epoch; upgrade the client")
	}
	if req.Version >= wire.Version2 && h.LogEpoch == nil && len(req.Commits) > 0 {
		return nil, syncerr.New(syncerr.CodeInvalidRequest, "epoch acquisition must not carry PUSH_COMMIT frames")
	}
	epochReset := req.Version >= wire.Version2 && (h.LogEpoch == nil || *h.LogEpoch != p.LogEpoch)
	latest, floor := e.cfg.Schema.Version(), e.oldestServed()
	r.cs = e.schemaFor(h.SchemaVersion)
	if r.cs == nil {
		return &wire.RespHeader{RequiredSchemaVersion: &floor, LatestSchemaVersion: &latest,
			LogEpoch: epochOf(req.Version, p), ResetRequired: epochReset}, nil
	}
	if epochReset {
		return &wire.RespHeader{LogEpoch: p.LogEpoch, ResetRequired: true}, nil
	}
	if err := r.checkClient(ctx); err != nil {
		return nil, err
	}
	if err := r.checkOperations(); err != nil {
		return nil, err
	}
	if err := r.checkPull(); err != nil {
		return nil, err
	}
	if err := r.resolve(ctx); err != nil {
		return nil, err
	}
	return nil, r.bindClient(ctx)
}

func epochOf(version uint16, p store.Partition) string {
	if version >= wire.Version2 {
		return p.LogEpoch
	}
	return ""
}

// checkClient refuses a clientId bound to another actor (§1.5). A new
// clientId is bound by bindClient once the request passed its checks.
func (r *request) checkClient(ctx context.Context) error {
	var rec store.ClientRecord
	if r.pre != nil { // read with the partition
		if r.pre.Client == nil {
			return nil
		}
		rec = *r.pre.Client
	} else {
		var err error
		rec, err = r.e.cfg.Store.Client(ctx, r.auth.Partition, r.req.Header.ClientID)
		if errors.Is(err, store.ErrNotFound) {
			return nil
		}
		if err != nil {
			return err
		}
	}
	if rec.ActorID != r.auth.ActorID {
		return errClientBound()
	}
	r.client = &rec
	return nil
}

// bindClient binds a new clientId to the actor before anything of the
// client's is read or written: an insert-if-absent, so of two actors
// racing on a fresh clientId exactly one gets it and the other is refused
// before any push result is looked up.
func (r *request) bindClient(ctx context.Context) error {
	if r.client != nil {
		return nil
	}
	rec, err := r.e.cfg.Store.BindClient(ctx, r.auth.Partition, store.ClientRecord{ClientID: r.req.Header.ClientID,
		ActorID: r.auth.ActorID, WireVersion: r.req.Version, Cursor: -1, UpdatedAtMs: r.e.cfg.Now()})
	if errors.Is(err, store.ErrStorageFull) && len(r.req.Commits) == 0 {
		// A read-only request writes nothing of the client's: with the
		// storage full it is served unbound (the binding is made by the
		// client's next request that can write).
		r.e.cfg.Logger.WarnContext(ctx, "client not bound: storage full", "partition", r.auth.Partition, "err", err)
		return nil
	}
	if err != nil {
		return err
	}
	if rec.ActorID != r.auth.ActorID {
		return errClientBound()
	}
	r.client = &rec
	return nil
}

func errClientBound() error {
	return syncerr.New(syncerr.CodeInvalidClientID, "clientId is bound to a different actor")
}

func (r *request) checkOperations() error {
	n := 0
	for _, c := range r.req.Commits {
		n += len(c.Operations)
	}
	if n > r.e.cfg.Limits.MaxOperationsPerRequest {
		return syncerr.New(syncerr.CodeTooManyOperations, "the request carries more operations than the server accepts")
	}
	return nil
}

func (r *request) checkPull() error {
	pull := r.req.Pull
	if pull == nil {
		return nil
	}
	if pull.Accept&(wire.AcceptInlineRows|wire.AcceptExternalRows) == 0 {
		return syncerr.New(syncerr.CodeInvalidRequest, "PULL_HEADER.accept must allow rows segments")
	}
	if n, limit := len(r.req.Subscriptions), r.e.cfg.Limits.MaxSubscriptionsPerRequest; n > limit {
		return syncerr.New(syncerr.CodeInvalidSubscription, "the request carries more subscriptions than the server accepts").
			WithDetails(struct {
				Limit int `json:"limit"`
				Count int `json:"count"`
			}{limit, n})
	}
	seen := make(map[string]bool, len(r.req.Subscriptions))
	for _, sub := range r.req.Subscriptions {
		if seen[sub.ID] {
			return syncerr.New(syncerr.CodeInvalidSubscription, "duplicate subscription id")
		}
		seen[sub.ID] = true
		t, ok := r.cs.Table(sub.Table)
		if !ok {
			return syncerr.New(syncerr.CodeUnknownTable, "a subscription names a table the server does not serve")
		}
		for _, sc := range sub.Scopes {
			if _, declared := t.VariableColumn(sc.Key); !declared {
				return syncerr.New(syncerr.CodeInvalidSubscription, "a subscription requests an undeclared scope key")
			}
			for _, v := range sc.Values {
				if v == "*" {
					return syncerr.New(syncerr.CodeInvalidSubscription, "'*' is not allowed in requested scopes")
				}
			}
		}
	}
	return nil
}

// resolve runs the host's scope resolver once for the request. A failing
// resolver fails closed; a result with undeclared keys is a server bug
// surfaced as sync.invalid_subscription (§3.2 rule 3).
func (r *request) resolve(ctx context.Context) error {
	if len(r.req.Commits) == 0 && len(r.req.Subscriptions) == 0 {
		return nil
	}
	if r.e.cfg.Resolve == nil {
		return nil
	}
	r.resolveStarted = time.Now()
	allowed, err := r.e.cfg.Resolve(ctx, ScopeRequest{Partition: r.auth.Partition, ActorID: r.auth.ActorID, ClientID: r.req.Header.ClientID})
	if err != nil && r.e.cfg.Leases != nil && errors.Is(err, ErrAuthorityUnavailable) {
		// An outage: the stored lease decides, and is not refreshed.
		leased, lerr := r.e.leaseAllowed(ctx, r.auth, r.req.Header.ClientID)
		if lerr != nil {
			r.reportResolve(ctx, nil, false)
			return lerr
		}
		r.allowed, r.resolveOK = leased, true
		r.reportResolve(ctx, leased, true)
		return nil
	}
	if err != nil {
		r.e.cfg.Logger.WarnContext(ctx, "scope resolver failed; failing closed", "partition", r.auth.Partition, "err", err)
		r.reportResolve(ctx, nil, false)
		return nil
	}
	for k := range allowed {
		if !r.e.cfg.Schema.DeclaresVariable(k) {
			r.reportResolve(ctx, nil, false)
			return syncerr.New(syncerr.CodeInvalidSubscription, "the scope resolver returned an undeclared scope key")
		}
	}
	r.allowed, r.resolveOK = allowed, true
	r.reportResolve(ctx, allowed, true)
	r.issueLease(ctx, allowed)
	return nil
}

// reportResolve tells realtime what the request resolved, so that the
// client's sockets never deliver what this request no longer grants.
func (r *request) reportResolve(ctx context.Context, allowed map[string][]string, ok bool) {
	if r.e.cfg.OnResolve != nil {
		r.e.cfg.OnResolve(ctx, r.auth, r.req.Header.ClientID, allowed, ok, r.resolveStarted)
	}
}

// serve writes the response body after the checks passed.
func (r *request) serve(ctx context.Context) error {
	served := r.e.cfg.Schema.Version()
	if err := r.enc.Encode(&wire.RespHeader{LatestSchemaVersion: &served, LogEpoch: epochOf(r.req.Version, r.partition)}); err != nil {
		return err
	}
	if r.lease != nil {
		if err := r.enc.Encode(r.lease); err != nil {
			return err
		}
	}
	if n := len(r.req.Commits); n > 0 {
		pctx, span := childSpan(ctx, "syncgo.push", "syncgo.commits", n)
		err := r.pushCommits(pctx)
		endSpan(span, err)
		if err != nil {
			return err
		}
	}
	if r.req.Pull != nil {
		pctx, span := childSpan(ctx, "syncgo.pull", "syncgo.subscriptions", len(r.req.Subscriptions))
		err := r.pull(pctx)
		endSpan(span, err)
		if err != nil {
			return err
		}
	}
	return r.saveClient(ctx)
}
