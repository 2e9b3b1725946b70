// Package webhook delivers a table's changes to an HTTP endpoint as durable
// reactions (spec §6.9, package reaction): each accepted commit that
// changes a hook's tables plans one delivery in its push transaction, and
// the reaction runner POSTs it, at least once, with retries and dead
// letters. It is what `syncgo serve` runs for the webhooks of its config
// file; a Go host passes Reactions' planner and handlers to
// syncgo.Config.Reactions.
//
// A delivery is a POST of a JSON body
//
//	{"id": "<idempotency key>", "attempt": 1, "event": {
//	    "hook": "todo-events", "partition": "default", "commit_seq": 12,
//	    "created_at": "2026-12-05T18:00:00Z", "actor_id": "alice",
//	    "client_id": "…", "client_commit_id": "…",
//	    "changes": [{"table": "todos", "row_id": "t1", "op": "insert", "row": {…}}]}}
//
// with the headers Syncgo-Webhook (the hook), Syncgo-Delivery (a hex
// SHA-256 of the idempotency key: the same on every attempt), and, with a
// secret, Syncgo-Signature: t=<unix seconds>,v1=<hex HMAC-SHA256 of
// "<t>.<body>">, one v1 per secret (the hook's secret first, then its
// previous secrets while they are rotated out). A 2xx answer completes it; 408, 425, 429, 5xx, a network
// error or the timeout retries it (webhook.unavailable with the status,
// webhook.unreachable with the reason: timeout, tls, refused, dns or
// network); any other status dead-letters it at once
// (webhook.refused).
package webhook

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/net/http/httpguts"

	"github.com/syncgo/syncgo/reaction"
	"github.com/syncgo/syncgo/schema"
	"github.com/syncgo/syncgo/validate"
	"github.com/syncgo/syncgo/wire"
)

// Hook is one webhook: the changes of some tables, POSTed to a URL.
type Hook struct {
	// Name names the hook; it is the reaction's name (a code-like name:
	// letters, digits, ".", "_", ":", "-").
	Name string `yaml:"name"`
	// URL is the endpoint, http or https.
	URL string `yaml:"url"`
	// Tables are the tables whose changes are delivered.
	Tables []string `yaml:"tables"`
	// Ops are the kinds of change delivered: insert, update, delete.
	// Empty: all three.
	Ops []string `yaml:"ops"`
	// Secret signs every delivery (Syncgo-Signature), at least
	// MinSecretBytes; empty: unsigned. SecretFile names a file holding it
	// (`syncgo serve` reads it into Secret).
	Secret     string `yaml:"secret"`
	SecretFile string `yaml:"secret_file"`
	// PreviousSecrets are secrets being rotated out: every delivery
	// carries a signature by each of them too, after Secret's, so that a
	// receiver still holding one of them verifies it (docs/reactions.md,
	// "Rotating a secret"). They need Secret, each at least
	// MinSecretBytes, at most MaxSecrets-1. PreviousSecretFiles name
	// files holding them (`syncgo serve` reads them into PreviousSecrets).
	PreviousSecrets     []string `yaml:"previous_secrets"`
	PreviousSecretFiles []string `yaml:"previous_secret_files"`
	// Headers are sent with every delivery (an API key, say).
	Headers map[string]string `yaml:"headers"`
	// Timeout bounds one delivery. Default 10 s.
	Timeout time.Duration `yaml:"timeout"`
	// MaxAttempts bounds the deliveries of one event (1 to 100). Default
	// 10.
	MaxAttempts int `yaml:"max_attempts"`
}

// The kinds of change.
const (
	OpInsert = "insert"
	OpUpdate = "update"
	OpDelete = "delete"
)

// Failure codes recorded with a failed delivery.
const (
	CodeUnavailable = "webhook.unavailable"
	CodeUnreachable = "webhook.unreachable"
	CodeRefused     = "webhook.refused"
)

// MinSecretBytes is the shortest secret a hook takes.
const MinSecretBytes = 16

// MaxSecrets is the most secrets a hook signs with: its secret and
// MaxSecrets-1 previous ones.
const MaxSecrets = 4

// MaxSignatures is the most v1 signatures VerifyAny reads in one header,
// and MaxSignatureHeaderBytes the longest header it parses: a longer
// header, or one with more signatures, is refused before any HMAC is
// computed (room for several times what a hook sends).
const (
	MaxSignatures           = 16
	MaxSignatureHeaderBytes = 2048
)

// DefaultTimeout is a delivery's timeout when a hook sets none.
const DefaultTimeout = 10 * time.Second

// eventVersion is the payload version of the planned events.
const eventVersion = 1

// rowBudget is the most bytes an event may hold with its rows; a larger
// event is planned without them ("rows_omitted": true), under the
// reactions' payload limit.
const rowBudget = reaction.MaxPayloadBytes - 4096

// reservedHeaders are set by the delivery and cannot be configured.
var reservedHeaders = []string{"Content-Type", "Content-Length", "Host", "Syncgo-Webhook", "Syncgo-Delivery", "Syncgo-Signature"}

// Check checks hooks against a schema: at most reaction.MaxPerCommit
// hooks, unique valid names, absolute http or https URLs, tables of the
// schema, known ops, headers that are valid and not reserved, bounds.
func Check(hooks []Hook, sc *schema.Compiled) error {
	var errs []error
	if len(hooks) > reaction.MaxPerCommit {
		// A commit changing a table they all watch would plan more
		// reactions than a commit may, and fail.
		errs = append(errs, fmt.Errorf("%d webhooks: at most %d", len(hooks), reaction.MaxPerCommit))
	}
	seen := map[string]bool{}
	for i, h := range hooks {
		fail := func(format string, args ...any) {
			errs = append(errs, fmt.Errorf("webhooks[%d] (%s): %s", i, h.Name, fmt.Sprintf(format, args...)))
		}
		if err := reaction.CheckName(h.Name); err != nil {
			fail("name: %v", err)
		} else if seen[h.Name] {
			fail("the name is used twice")
		}
		seen[h.Name] = true
		if u, err := url.Parse(h.URL); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			fail("url %s: want an absolute http or https URL", h.Endpoint())
		}
		if len(h.Tables) == 0 {
			fail("tables: name at least one table")
		}
		for _, t := range h.Tables {
			if _, ok := sc.Table(t); !ok {
				fail("the schema has no table %q", t)
			}
		}
		for _, op := range h.Ops {
			if op != OpInsert && op != OpUpdate && op != OpDelete {
				fail("ops: %q is not insert, update or delete", op)
			}
		}
		if h.Secret != "" && len(h.Secret) < MinSecretBytes {
			fail("the secret has %d bytes: at least %d are needed", len(h.Secret), MinSecretBytes)
		}
		checkPrevious(h, fail)
		for k, v := range h.Headers {
			switch {
			case !httpguts.ValidHeaderFieldName(k) || !httpguts.ValidHeaderFieldValue(v):
				fail("header %q is not a valid header", k)
			case slices.ContainsFunc(reservedHeaders, func(r string) bool { return strings.EqualFold(r, k) }):
				fail("header %q is set by the delivery", k)
			}
		}
		if h.Timeout < 0 {
			fail("timeout is negative")
		}
		if h.MaxAttempts < 0 || h.MaxAttempts > reaction.MaxAttempts {
			fail("max_attempts %d: want 1 to %d", h.MaxAttempts, reaction.MaxAttempts)
		}
	}
	return errors.Join(errs...)
}

// checkPrevious checks a hook's secret files (read already) and previous
// secrets, never naming a secret's value.
func checkPrevious(h Hook, fail func(string, ...any)) {
	if h.SecretFile != "" || len(h.PreviousSecretFiles) > 0 {
		// Package webhook reads no file: a hook given only a file would
		// deliver unsigned, or without the previous signatures.
		fail("secret_file and previous_secret_files are read by syncgo serve: a Go host reads them into Secret and PreviousSecrets")
	}
	if len(h.PreviousSecrets) == 0 {
		return
	}
	if h.Secret == "" {
		fail("previous_secrets need a secret: the newest secret goes in secret")
	}
	if n := 1 + len(h.PreviousSecrets); n > MaxSecrets {
		fail("%d secrets: at most %d (secret and %d previous)", n, MaxSecrets, MaxSecrets-1)
	}
	for j, s := range h.PreviousSecrets {
		switch first := slices.Index(h.PreviousSecrets, s); {
		case len(s) < MinSecretBytes:
			fail("previous_secrets[%d] has %d bytes: at least %d are needed", j, len(s), MinSecretBytes)
		case s == h.Secret:
			fail("previous_secrets[%d] is the secret itself", j)
		case first < j:
			fail("previous_secrets[%d] repeats previous_secrets[%d]", j, first)
		}
	}
}

// signingSecrets are the secrets a hook signs with, newest first; none
// for an unsigned hook.
func (h *Hook) signingSecrets() [][]byte {
	if h.Secret == "" {
		return nil
	}
	out := [][]byte{[]byte(h.Secret)}
	for _, s := range h.PreviousSecrets {
		out = append(out, []byte(s))
	}
	return out
}

// Reactions returns the planner and the handlers of hooks (checked with
// Check first), delivering with client (nil: a client of its own, which
// follows no redirect: a 3xx answer is a refusal).
func Reactions(hooks []Hook, sc *schema.Compiled, client *http.Client) (reaction.Planner, map[string]reaction.Handler, error) {
	if err := Check(hooks, sc); err != nil {
		return nil, nil, err
	}
	if client == nil {
		client = &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	}
	hooks = slices.Clone(hooks)
	handlers := make(map[string]reaction.Handler, len(hooks))
	for i := range hooks {
		h := &hooks[i]
		if h.Timeout == 0 {
			h.Timeout = DefaultTimeout
		}
		secrets := h.signingSecrets()
		handlers[h.Name] = func(ctx context.Context, d *reaction.Delivery) error { return deliver(ctx, client, h, secrets, d) }
	}
	planner := func(_ context.Context, c *reaction.Commit) ([]reaction.Plan, error) {
		var plans []reaction.Plan
		for i := range hooks {
			if p, ok, err := plan(&hooks[i], c); err != nil {
				return nil, err
			} else if ok {
				plans = append(plans, p)
			}
		}
		return plans, nil
	}
	return planner, handlers, nil
}

// event is a planned delivery's payload.
type event struct {
	Hook           string   `json:"hook"`
	Partition      string   `json:"partition"`
	CommitSeq      int64    `json:"commit_seq"`
	CreatedAt      string   `json:"created_at"`
	ActorID        string   `json:"actor_id"`
	ClientID       string   `json:"client_id"`
	ClientCommitID string   `json:"client_commit_id"`
	Changes        []change `json:"changes"`
	RowsOmitted    bool     `json:"rows_omitted,omitempty"`
	// ChangesOmitted counts the changes left out of an event whose list
	// of changes alone would pass the payload bound (the first ones are
	// kept, in order).
	ChangesOmitted int `json:"changes_omitted,omitempty"`
}

type change struct {
	Table string       `json:"table"`
	RowID string       `json:"row_id"`
	Op    string       `json:"op"`
	Row   validate.Row `json:"row,omitempty"`
}

// opKind is the kind of change an operation makes; "" for a delete of an
// absent row (no change).
func opKind(op *validate.Operation) string {
	switch {
	case op.Op == wire.OpDelete && op.Stored == nil:
		return ""
	case op.Op == wire.OpDelete:
		return OpDelete
	case op.Stored == nil:
		return OpInsert
	}
	return OpUpdate
}

// plan builds the hook's event of a commit; ok is false when the commit
// changes none of its tables.
func plan(h *Hook, c *reaction.Commit) (reaction.Plan, bool, error) {
	ev := event{Hook: h.Name, Partition: c.Partition, CommitSeq: c.Seq, CreatedAt: c.CreatedAt.UTC().Format(time.RFC3339Nano),
		ActorID: c.ActorID, ClientID: c.ClientID, ClientCommitID: c.ClientCommitID}
	for i := range c.Operations {
		op := &c.Operations[i]
		kind := opKind(op)
		if kind == "" || !slices.Contains(h.Tables, op.Table) || (len(h.Ops) > 0 && !slices.Contains(h.Ops, kind)) {
			continue
		}
		ev.Changes = append(ev.Changes, change{Table: op.Table, RowID: op.RowID, Op: kind, Row: op.Row})
	}
	if len(ev.Changes) == 0 {
		return reaction.Plan{}, false, nil
	}
	payload, err := reaction.NormalizePayload(ev)
	if err != nil || len(payload) > rowBudget {
		for i := range ev.Changes {
			ev.Changes[i].Row = nil
		}
		ev.RowsOmitted = true
		if payload, err = reaction.NormalizePayload(ev); err != nil || len(payload) > rowBudget {
			// Even the list of changes is too large (hundreds of
			// operations, a cascade's deletes): the event keeps the
			// changes that fit and counts the others, rather than fail
			// the commit's push for good.
			if payload, err = truncateChanges(&ev); err != nil {
				return reaction.Plan{}, false, fmt.Errorf("webhook %s: %w", h.Name, err)
			}
		}
	}
	return reaction.Plan{Key: "webhook:" + h.Name, Name: h.Name, Version: eventVersion,
		Payload: json.RawMessage(payload), MaxAttempts: h.MaxAttempts}, true, nil
}

// truncateChanges keeps the leading changes of ev (rows already omitted)
// that fit in rowBudget, records how many it dropped, and returns the
// normalized payload.
func truncateChanges(ev *event) ([]byte, error) {
	all := ev.Changes
	ev.Changes, ev.ChangesOmitted = []change{}, len(all)
	base, err := reaction.NormalizePayload(ev)
	if err != nil {
		return nil, err
	}
	size, kept := len(base)+16, 0 // room for the count's digits
	for i := range all {
		c, err := reaction.NormalizePayload(all[i])
		if err != nil {
			return nil, err
		}
		if size+len(c)+1 > rowBudget {
			break
		}
		size += len(c) + 1
		kept++
	}
	ev.Changes, ev.ChangesOmitted = all[:kept], len(all)-kept
	return reaction.NormalizePayload(ev)
}

// deliver POSTs one delivery, signed with secrets (none: unsigned).
func deliver(ctx context.Context, client *http.Client, h *Hook, secrets [][]byte, d *reaction.Delivery) error {
	if d.Version != eventVersion {
		return reaction.Permanent("webhook.unknown_version", map[string]any{"version": d.Version})
	}
	id, err := json.Marshal(d.IdempotencyKey)
	if err != nil {
		return reaction.Permanent("webhook.bad_key", nil)
	}
	var body bytes.Buffer
	body.WriteString(`{"id":`)
	body.Write(id)
	body.WriteString(`,"attempt":`)
	body.WriteString(strconv.Itoa(d.Attempt))
	body.WriteString(`,"event":`)
	body.Write(d.Payload)
	body.WriteString("}")
	ctx, cancel := context.WithTimeout(ctx, h.Timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, h.URL, bytes.NewReader(body.Bytes()))
	if err != nil {
		return reaction.Permanent(CodeRefused, map[string]any{"reason": "bad request"})
	}
	for k, v := range h.Headers {
		req.Header.Set(k, v)
	}
	sum := sha256.Sum256([]byte(d.IdempotencyKey))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Syncgo-Webhook", h.Name)
	req.Header.Set("Syncgo-Delivery", hex.EncodeToString(sum[:]))
	if len(secrets) > 0 {
		req.Header.Set("Syncgo-Signature", SignAll(secrets, time.Now(), body.Bytes()))
	}
	resp, err := client.Do(req)
	if err != nil {
		return reaction.Retry(CodeUnreachable, map[string]any{"reason": unreachableReason(err)})
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	_ = resp.Body.Close()
	switch s := resp.StatusCode; {
	case s >= 200 && s < 300:
		return nil
	case s == http.StatusRequestTimeout, s == http.StatusTooEarly, s == http.StatusTooManyRequests, s >= 500:
		return reaction.Retry(CodeUnavailable, map[string]any{"status": s})
	default:
		return reaction.Permanent(CodeRefused, map[string]any{"status": s})
	}
}

// unreachableReason classifies a failed request for the stored failure
// (an operator tells a certificate problem from a timeout or a refused
// connection): timeout, tls, refused, dns or network. Never the error's
// text, which may hold the URL.
func unreachableReason(err error) string {
	var (
		dns      *net.DNSError
		unknown  x509.UnknownAuthorityError
		hostname x509.HostnameError
		invalid  x509.CertificateInvalidError
		verify   *tls.CertificateVerificationError
		alert    tls.AlertError
		header   tls.RecordHeaderError
	)
	switch {
	case errors.Is(err, context.DeadlineExceeded):
		return "timeout"
	case errors.As(err, &verify), errors.As(err, &unknown), errors.As(err, &hostname), errors.As(err, &invalid),
		errors.As(err, &alert), errors.As(err, &header):
		return "tls"
	case errors.Is(err, syscall.ECONNREFUSED):
		return "refused"
	case errors.As(err, &dns):
		return "dns"
	}
	return "network"
}

// Endpoint is the hook's URL for logs and config check: without
// credentials, query or fragment, and with only the first segment of its
// path, the rest shown as "…". A chat service's incoming-webhook URL
// (https://hooks.example.com/services/T0/B0/token) carries its secret in
// the path.
func (h Hook) Endpoint() string {
	u, err := url.Parse(h.URL)
	if err != nil {
		return "(invalid URL)"
	}
	path := u.EscapedPath()
	if i := strings.IndexByte(strings.TrimPrefix(path, "/"), '/'); i >= 0 && i+2 < len(path) {
		path = path[:i+2] + "…"
	}
	return u.Scheme + "://" + u.Host + path
}

// Sign returns the Syncgo-Signature header of a body sent at t:
// "t=<unix seconds>,v1=<hex HMAC-SHA256 of "<t>.<body>">".
func Sign(secret []byte, t time.Time, body []byte) string {
	return SignAll([][]byte{secret}, t, body)
}

// SignAll returns the Syncgo-Signature header of a body sent at t with
// one v1 signature per secret, in their order:
// "t=<unix seconds>,v1=<sig 1>,v1=<sig 2>".
func SignAll(secrets [][]byte, t time.Time, body []byte) string {
	ts := strconv.FormatInt(t.Unix(), 10)
	var b strings.Builder
	b.WriteString("t=")
	b.WriteString(ts)
	for _, s := range secrets {
		b.WriteString(",v1=")
		b.WriteString(signature(s, ts, body))
	}
	return b.String()
}

// signature is the hex HMAC-SHA256 of "<ts>.<body>".
func signature(secret []byte, ts string, body []byte) string {
	m := hmac.New(sha256.New, secret)
	m.Write([]byte(ts))
	m.Write([]byte("."))
	m.Write(body)
	return hex.EncodeToString(m.Sum(nil))
}

// Verify checks a Syncgo-Signature header against a body, and that its
// time is within tolerance of now: what a receiver does. It is VerifyAny
// with one secret: any v1 signature of the header made with it verifies.
// A secret shorter than MinSecretBytes verifies nothing.
func Verify(secret []byte, header string, body []byte, now time.Time, tolerance time.Duration) error {
	return VerifyAny([][]byte{secret}, header, body, now, tolerance)
}

// VerifyAny checks a Syncgo-Signature header against a body: it verifies
// when any v1 signature of the header is the HMAC of "<t>.<body>" under
// any of secrets (a receiver holding the old and the new secret while a
// hook's secret is rotated), and t is within tolerance of now. Other
// keys of the header are ignored. A header longer than
// MaxSignatureHeaderBytes, with more than MaxSignatures v1 signatures or
// with a t other than once is refused; so is a list of no secrets or
// with one shorter than MinSecretBytes. Comparisons are in constant time.
func VerifyAny(secrets [][]byte, header string, body []byte, now time.Time, tolerance time.Duration) error {
	if len(secrets) == 0 {
		return errors.New("webhook: no secret to verify with")
	}
	for _, s := range secrets {
		if len(s) < MinSecretBytes {
			return errors.New("webhook: the secret is shorter than the minimum")
		}
	}
	if len(header) > MaxSignatureHeaderBytes {
		return errors.New("webhook: the signature header is too long")
	}
	var (
		ts    string
		times int
		sigs  = make([]string, 0, MaxSignatures)
	)
	for part := range strings.SplitSeq(header, ",") {
		k, v, _ := strings.Cut(strings.TrimSpace(part), "=")
		switch k {
		case "t":
			ts, times = v, times+1
		case "v1":
			if len(sigs) == MaxSignatures {
				return errors.New("webhook: too many signatures in the header")
			}
			sigs = append(sigs, v)
		}
	}
	sec, err := strconv.ParseInt(ts, 10, 64)
	if err != nil || times != 1 || strconv.FormatInt(sec, 10) != ts || len(sigs) == 0 {
		return errors.New("webhook: malformed signature header")
	}
	if d := now.Sub(time.Unix(sec, 0)); d > tolerance || d < -tolerance {
		return errors.New("webhook: signature time outside the tolerance")
	}
	ok := false
	for _, s := range secrets {
		want := []byte(signature(s, ts, body))
		for _, sig := range sigs {
			ok = hmac.Equal(want, []byte(sig)) || ok
		}
	}
	if !ok {
		return errors.New("webhook: signature mismatch")
	}
	return nil
}
