// Package reaction holds durable server reactions (§6.9 of the protocol):
// work that must follow an accepted commit (send the e-mail, call the
// webhook), planned inside the push transaction and delivered afterwards,
// at least once, by a leased runner with retries, backoff and dead
// letters. A host configures them with syncgo.Config.Reactions.
//
// A Planner runs inside the push transaction of every new commit, after
// every validator accepted it: it sees the commit's operations, origin and
// sequence, may read the candidate state (validate.Reader), and returns the
// reactions to plan. They are stored in sync_reactions in the same
// transaction as the commit: a commit that rolls back (a conflict, a
// rejection by a validator, a failure) plans nothing, and an applied commit
// never loses its reactions. A replay of a recorded commit runs nothing. A
// planner must be pure: no e-mail, no webhook, nothing outside the
// transaction; an error (or a panic) fails the push as a server failure,
// with nothing recorded, and the client retries.
//
// A Handler delivers the reactions of one name. The server's runner claims
// due reactions under a lease, calls the handler with a context, marks the
// reaction completed when it returns nil, and otherwise retries it with
// exponential backoff and jitter until its attempts run out, then keeps it
// as a dead letter. Delivery is at least once: a handler may run again for
// a reaction whose effect already happened (its process died before the
// completion was recorded), so it passes Delivery.IdempotencyKey to
// external systems that support idempotent requests.
//
//	cfg.Reactions = &reaction.Config{
//		Planner: func(ctx context.Context, c *reaction.Commit) ([]reaction.Plan, error) {
//			var out []reaction.Plan
//			for _, op := range c.Operations {
//				if op.Table == "invoices" && op.Op == validate.Upsert && op.Stored == nil {
//					out = append(out, reaction.Plan{Key: "mail:" + op.RowID, Name: "invoice.mail",
//						Payload: map[string]any{"invoice": op.RowID}})
//				}
//			}
//			return out, nil
//		},
//		Handlers: map[string]reaction.Handler{
//			"invoice.mail": func(ctx context.Context, d *reaction.Delivery) error {
//				return mailer.Send(ctx, d.IdempotencyKey, d.Payload)
//			},
//		},
//	}
package reaction

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"math/rand/v2"
	"strconv"
	"time"
	"unicode/utf8"

	"github.com/syncgo/syncgo/internal/jsonb"
	"github.com/syncgo/syncgo/store"
	"github.com/syncgo/syncgo/validate"
)

// The bounds of §6.9.
const (
	// MaxPerCommit bounds the reactions one commit may plan.
	MaxPerCommit = 100
	// MaxKeyBytes bounds a plan's key, MaxNameBytes its name.
	MaxKeyBytes  = 256
	MaxNameBytes = 128
	// MaxPayloadBytes bounds a payload's normalized JSON, MaxPayloadDepth
	// its nesting.
	MaxPayloadBytes = 64 << 10
	MaxPayloadDepth = 16
	// MaxDetailsBytes bounds a failure's details.
	MaxDetailsBytes = 8 << 10
	// DefaultMaxAttempts is a plan's attempts when it sets none;
	// MaxAttempts the most it may set.
	DefaultMaxAttempts = 10
	MaxAttempts        = 100
)

// Plan is a reaction a planner plans.
type Plan struct {
	// Key identifies the reaction within its commit: non-empty UTF-8 of
	// at most MaxKeyBytes, unique among the commit's plans.
	Key string
	// Name selects the handler (the spec's type): a registered handler
	// name.
	Name string
	// Version is the payload's version (positive); 0 means 1. A handler
	// treats a version it does not know as a permanent failure.
	Version int32
	// Payload is marshaled with encoding/json (a json.RawMessage is taken
	// as JSON text) and stored normalized (object keys sorted, compact):
	// plain JSON of at most MaxPayloadDepth levels and MaxPayloadBytes.
	Payload any
	// MaxAttempts bounds the deliveries (1 to MaxAttempts); 0 means
	// DefaultMaxAttempts.
	MaxAttempts int
}

// Commit is what a planner sees: a new commit whose every operation and
// validator accepted, about to be recorded.
type Commit struct {
	validate.Origin
	// Seq is the commit's sequence in the partition's log. A commit whose
	// every operation was a no-op (deletes of absent rows) appends no
	// commit: Seq is then the newest sequence it was applied at.
	Seq int64
	// CreatedAt is the commit's time (the server clock).
	CreatedAt time.Time
	// Operations are the commit's operations, as the whole-commit
	// validator sees them (validate.Commit.Operations).
	Operations []validate.Operation
	// Tx reads the commit's final candidate state. Its methods must be
	// called only from the planner, before it returns.
	Tx validate.Reader
}

// Planner plans the reactions of a commit (§6.9). It must be pure: it
// reads and returns data, and does nothing outside the transaction.
type Planner func(ctx context.Context, c *Commit) ([]Plan, error)

// Delivery is what a handler receives: one attempt at one reaction.
type Delivery struct {
	Partition string
	// IdempotencyKey is stable across attempts and processes: the JSON
	// array [partition, clientId, clientCommitId, key]. Pass it to
	// external systems that deduplicate requests.
	IdempotencyKey string
	Name           string
	Version        int32
	// Payload is the planned payload's JSON: its normalized text on
	// SQLite; on Postgres jsonb's rendering of the same value (a space
	// after each colon and comma, shorter keys first, a number such as
	// 1E+2 written 100). Parse it; do not compare or sign its bytes.
	Payload json.RawMessage
	// Attempt counts from 1; MaxAttempts is the last.
	Attempt     int
	MaxAttempts int
	// The source commit.
	SourceClientID       string
	SourceClientCommitID string
	SourceCommitSeq      int64
	CreatedAt            time.Time
}

// Handler delivers one reaction. It returns nil when the work is done; an
// error retries the reaction after a backoff (until its attempts run out:
// then it becomes a dead letter), unless it is a Permanent error, which
// dead-letters it at once. A panic is a retryable failure. The context is
// cancelled when the handler's timeout passes, when its lease is lost
// (another runner may take the reaction over: the handler must stop), or
// when the server stops: a handler must return promptly then.
type Handler func(ctx context.Context, d *Delivery) error

// Error is a handler failure with a stable code and optional details,
// which are recorded with the reaction (the error's text never is). Build
// it with Retry or Permanent.
type Error struct {
	code      string
	details   []byte
	permanent bool
}

// Retry returns a retryable failure with a code (code-like, at most
// MaxNameBytes) and details (a value encoding/json marshals to an object
// of at most MaxDetailsBytes, or nil). An invalid code records
// reaction.handler_failed instead; invalid details are left out.
func Retry(code string, details any) *Error { return newError(code, details, false) }

// Permanent returns a failure that dead-letters the reaction at once (a
// payload version the handler does not know, a request the remote system
// refuses for good). Code and details are as for Retry.
func Permanent(code string, details any) *Error { return newError(code, details, true) }

func newError(code string, details any, permanent bool) *Error {
	if CheckName(code) != nil {
		code = CodeHandlerFailed
	}
	e := &Error{code: code, permanent: permanent}
	if details != nil {
		if b, err := normalize(details, MaxDetailsBytes); err == nil && len(b) > 0 && b[0] == '{' {
			e.details = b
		}
	}
	return e
}

// Error implements error. A nil *Error (returned as an error, it is not
// a nil error) reads as a plain failure.
func (e *Error) Error() string {
	if e == nil {
		return "reaction: failure (a nil *reaction.Error)"
	}
	if e.permanent {
		return "reaction: permanent failure " + e.code
	}
	return "reaction: failure " + e.code
}

// Code returns the failure code.
func (e *Error) Code() string { return e.code }

// IsPermanent reports whether the failure dead-letters the reaction.
func (e *Error) IsPermanent() bool { return e.permanent }

// DetailsJSON returns the normalized details object, or nil.
func (e *Error) DetailsJSON() []byte { return e.details }

// The failure codes the runner records for failures without an *Error.
const (
	// CodeHandlerFailed: the handler returned another error, or panicked.
	CodeHandlerFailed = "reaction.handler_failed"
	// CodeHandlerTimeout: the handler ran past Config.HandlerTimeout.
	CodeHandlerTimeout = "reaction.handler_timeout"
	// CodeLeaseExpired: a runner's lease expired on the last attempt (its
	// process died or lost the database); recorded by the next claim.
	CodeLeaseExpired = "reaction.lease_expired"
)

// Config configures durable reactions. Zero durations take the defaults
// noted.
type Config struct {
	// Planner plans the reactions of each new commit; nil plans none
	// (the runner still delivers what other processes planned).
	Planner Planner
	// Handlers deliver the reactions, by name. A plan whose name has no
	// handler here fails its push.
	Handlers map[string]Handler
	// Workers bounds the handlers this process runs at once. Default 4;
	// negative: this process runs no handler (it only plans). With
	// several handler names, one name runs at most Workers-1 of them, so
	// a name whose handlers hang leaves a worker to the others.
	Workers int
	// LeaseDuration is how long a claim holds a reaction before another
	// process may take it over; the runner renews it while the handler
	// runs (every third of it), and cancels the handler's context when a
	// renewal fails for good or can no longer land before the expiry, so
	// no two processes run a reaction while a lease is valid. It is also
	// how long a dead process's reactions wait. Default 30 s, at least
	// 100 ms.
	LeaseDuration time.Duration
	// HandlerTimeout bounds one handler call (its context's deadline); a
	// timeout is a retryable failure. Default 0: no bound but the lease.
	HandlerTimeout time.Duration
	// PollInterval is how often the runner looks for due reactions
	// planned by other processes or waiting out a backoff (a commit of
	// this process wakes it at once). Default 1 s.
	PollInterval time.Duration
	// InitialBackoff and MaxBackoff bound the retry delay: after attempt
	// n, min(MaxBackoff, InitialBackoff × 2^(n−1)), scaled by a random
	// factor in [0.5, 1]. Defaults 1 s and 5 min.
	InitialBackoff time.Duration
	MaxBackoff     time.Duration
	// CompletedRetention and DeadRetention are how long completed
	// reactions and dead letters are kept; PruneInterval how often the
	// runner deletes older ones. Defaults 30 days, 90 days and 1 hour; a
	// negative PruneInterval disables pruning.
	CompletedRetention time.Duration
	DeadRetention      time.Duration
	PruneInterval      time.Duration
	// OnEvent, when set, receives the reactions' lifecycle events (§6.9):
	// fire-and-forget operational events, called synchronously on the
	// goroutine of the transition (keep it short, never block; a panic
	// is recovered and logged). They do not replace the stored state.
	OnEvent func(Event)
}

// The lifecycle event types (Event.Type).
const (
	// EventQueued: a commit that planned the reaction is durable. The
	// push emits it after its commit, so a runner that claims the
	// reaction at once may emit EventStarted before it.
	EventQueued = "reaction.queued"
	// EventStarted: a runner claimed it and calls its handler.
	EventStarted = "reaction.started"
	// EventRetried: the attempt failed; it is pending again at RetryAt.
	EventRetried = "reaction.retried"
	// EventCompleted: the handler succeeded and the completion is stored.
	EventCompleted = "reaction.completed"
	// EventDeadLettered: it failed for good (Code).
	EventDeadLettered = "reaction.dead_lettered"
	// EventPruneCompleted: a pruning pass deleted terminal reactions past
	// their retention (Prune; the event has no reaction).
	EventPruneCompleted = "reaction.prune_completed"
)

// Emit calls on with ev, recovering (and logging) a panic: events never
// break what emits them.
func Emit(on func(Event), logger *slog.Logger, ev Event) {
	if on == nil {
		return
	}
	defer func() {
		if p := recover(); p != nil && logger != nil {
			logger.Error("reaction event hook panicked", "event", ev.Type, "panic", fmt.Sprint(p))
		}
	}()
	on(ev)
}

// Event is one lifecycle event of a reaction.
type Event struct {
	Type           string
	Partition      string
	IdempotencyKey string
	Name           string
	// Attempt is the attempt the event is about (0 for queued).
	Attempt int
	// Code is the failure's code (retried, dead-lettered).
	Code string
	// RetryAt is when a retried reaction is due again.
	RetryAt time.Time
	// At is when the transition happened.
	At time.Time
	// Prune is the pass of a prune_completed event.
	Prune *PruneSummary
}

// PruneSummary is one pruning pass: the cutoffs (terminal reactions older
// than these were deleted), what it deleted of each state, its row limit,
// and whether more may remain (it deleted as many rows as its limit).
type PruneSummary struct {
	CompletedBefore, DeadLetteredBefore time.Time
	Completed, DeadLettered, Limit      int
	MayHaveMore                         bool
}

// WithDefaults returns c with the defaults of its zero fields.
func (c Config) WithDefaults() Config {
	if c.Workers == 0 {
		c.Workers = 4
	}
	if c.LeaseDuration <= 0 {
		c.LeaseDuration = 30 * time.Second
	}
	c.LeaseDuration = max(c.LeaseDuration, 100*time.Millisecond)
	if c.PollInterval <= 0 {
		c.PollInterval = time.Second
	}
	if c.InitialBackoff <= 0 {
		c.InitialBackoff = time.Second
	}
	if c.MaxBackoff <= 0 {
		c.MaxBackoff = 5 * time.Minute
	}
	c.MaxBackoff = max(c.MaxBackoff, c.InitialBackoff)
	if c.CompletedRetention <= 0 {
		c.CompletedRetention = 30 * 24 * time.Hour
	}
	if c.DeadRetention <= 0 {
		c.DeadRetention = 90 * 24 * time.Hour
	}
	if c.PruneInterval == 0 {
		c.PruneInterval = time.Hour
	}
	return c
}

// Check reports a configuration error: a handler name that is not
// code-like, a nil handler, or a planner without handlers (it could plan
// nothing).
func (c *Config) Check() error {
	if c.Planner != nil && len(c.Handlers) == 0 {
		return errors.New("a planner needs the handlers of the names it plans")
	}
	for name, h := range c.Handlers {
		if err := CheckName(name); err != nil {
			return fmt.Errorf("reaction handler %q: %w", name, err)
		}
		if h == nil {
			return fmt.Errorf("reaction handler %q is nil", name)
		}
	}
	return nil
}

// Backoff is the delay before the attempt after attempt (counted from 1):
// min(max, initial × 2^(attempt−1)) scaled by a random factor in [0.5, 1].
func Backoff(attempt int, initial, max time.Duration) time.Duration {
	d := max
	if attempt < 1 {
		attempt = 1
	}
	if attempt-1 < 62 {
		if x := initial << (attempt - 1); x > 0 && x>>(attempt-1) == initial && x < max {
			d = x
		}
	}
	return d/2 + rand.N(d/2+1)
}

// CheckName reports whether name is code-like: an ASCII letter, then
// letters, digits and . _ : -, at most MaxNameBytes.
func CheckName(name string) error {
	if name == "" || len(name) > MaxNameBytes {
		return fmt.Errorf("a name is 1-%d bytes", MaxNameBytes)
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		letter := c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z'
		if i == 0 && !letter {
			return errors.New("a name starts with an ASCII letter")
		}
		if !letter && !(c >= '0' && c <= '9') && c != '.' && c != '_' && c != ':' && c != '-' {
			return fmt.Errorf("a name holds only letters, digits and . _ : - (not %q)", c)
		}
	}
	return nil
}

// Prepare checks the plans of a commit against §6.9's bounds and returns
// the rows its transaction stores. known reports whether a name has a
// handler. Any invalid plan fails the whole commit.
func Prepare(plans []Plan, o validate.Origin, seq, createdAtMs int64, known func(name string) bool) ([]store.NewReaction, error) {
	if len(plans) > MaxPerCommit {
		return nil, fmt.Errorf("reaction planner returned %d reactions; a commit plans at most %d", len(plans), MaxPerCommit)
	}
	out := make([]store.NewReaction, 0, len(plans))
	keys := make(map[string]bool, len(plans))
	for i, p := range plans {
		if err := CheckName(p.Name); err != nil {
			return nil, fmt.Errorf("reaction %d: name %q: %w", i, p.Name, err)
		}
		if !known(p.Name) {
			return nil, fmt.Errorf("reaction %d: no handler is registered for %q", i, p.Name)
		}
		if p.Key == "" || len(p.Key) > MaxKeyBytes || !utf8.ValidString(p.Key) {
			return nil, fmt.Errorf("reaction %d: the key must be UTF-8 of 1-%d bytes", i, MaxKeyBytes)
		}
		if keys[p.Key] {
			return nil, fmt.Errorf("reaction %d: key %q is planned twice", i, p.Key)
		}
		keys[p.Key] = true
		version := p.Version
		if version == 0 {
			version = 1
		}
		if version < 0 {
			return nil, fmt.Errorf("reaction %d: the version must be positive", i)
		}
		attempts := p.MaxAttempts
		if attempts == 0 {
			attempts = DefaultMaxAttempts
		}
		if attempts < 1 || attempts > MaxAttempts {
			return nil, fmt.Errorf("reaction %d: max attempts must be 1-%d", i, MaxAttempts)
		}
		payload, err := NormalizePayload(p.Payload)
		if err != nil {
			return nil, fmt.Errorf("reaction %d: payload: %w", i, err)
		}
		out = append(out, store.NewReaction{
			IdempotencyKey: store.ReactionIdempotencyKey(o.Partition, o.ClientID, o.ClientCommitID, p.Key),
			Type:           p.Name, Version: version, Payload: payload,
			SourceClientID: o.ClientID, SourceClientCommitID: o.ClientCommitID, SourceCommitSeq: seq,
			CreatedAtMs: createdAtMs, MaxAttempts: attempts,
		})
	}
	return out, nil
}

// NormalizePayload returns the stored form of a payload: v marshaled with
// encoding/json (a json.RawMessage as is), parsed, checked (at most
// MaxPayloadDepth levels) and written again compact with object keys
// sorted bytewise and no HTML escaping; at most MaxPayloadBytes. Every
// store keeps the text it returns: it refuses a string holding U+0000 and
// a number outside Postgres's numeric range (such as 1e-999999), which a
// jsonb column cannot hold.
func NormalizePayload(v any) ([]byte, error) { return normalize(v, MaxPayloadBytes) }

func normalize(v any, maxBytes int) ([]byte, error) {
	var raw []byte
	switch x := v.(type) {
	case json.RawMessage:
		raw = x
	default:
		b, err := json.Marshal(v)
		if err != nil {
			return nil, err
		}
		raw = b
	}
	if len(raw) > 4*maxBytes+1024 {
		// Normalizing only removes white space and escapes: far larger
		// input cannot fit, and is not parsed.
		return nil, fmt.Errorf("the JSON exceeds %d bytes", maxBytes)
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var parsed any
	if err := dec.Decode(&parsed); err != nil {
		return nil, fmt.Errorf("invalid JSON: %w", err)
	}
	if len(bytes.TrimLeft(raw[dec.InputOffset():], " \t\r\n")) > 0 {
		return nil, errors.New("invalid JSON: text after the value")
	}
	if err := checkDepth(parsed, 0); err != nil {
		return nil, err
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(parsed); err != nil {
		return nil, err
	}
	out := bytes.TrimSuffix(buf.Bytes(), []byte("\n"))
	if len(out) > maxBytes {
		return nil, fmt.Errorf("the JSON exceeds %d bytes", maxBytes)
	}
	if !jsonb.Holds(string(out)) {
		// SQLite would keep it; Postgres's jsonb refuses it, and the
		// commit with it. Refused on both, a planner's mistake shows in
		// development on either driver.
		return nil, errors.New("the JSON holds a \\u0000 escape or a number outside Postgres's numeric range, which the stores do not all keep")
	}
	return out, nil
}

func checkDepth(v any, depth int) error {
	if depth > MaxPayloadDepth {
		return fmt.Errorf("the JSON nests deeper than %d levels", MaxPayloadDepth)
	}
	switch x := v.(type) {
	case map[string]any:
		for _, e := range x {
			if err := checkDepth(e, depth+1); err != nil {
				return err
			}
		}
	case []any:
		for _, e := range x {
			if err := checkDepth(e, depth+1); err != nil {
				return err
			}
		}
	case json.Number:
		if f, err := strconv.ParseFloat(string(x), 64); err != nil || math.IsInf(f, 0) {
			return fmt.Errorf("the JSON number %.40s is not finite", x)
		}
	}
	return nil
}

// Backlog is the state of the reactions not completed, in every
// partition.
type Backlog struct {
	// Pending reactions wait for a runner: due, waiting out a retry's
	// backoff, or left by a runner whose lease expired.
	Pending int64
	// Running reactions are held by a runner under a valid lease.
	Running int64
	// Dead letters failed for good; they stay until retried, dropped or
	// pruned.
	Dead int64
	// OldestPending is the age of the oldest pending reaction, from its
	// commit; 0 when none is pending.
	OldestPending time.Duration
}
