// Package producer writes commits to an SSP2 server from a process that
// keeps no local replica (spec §6.10, database-less commit producers): a
// Go backend, a job, an importer. Each Push sends one commit in a
// push-only request to POST <url>/sync, and the server applies the same
// authorization, validation, conflict, idempotency, commit-log and
// realtime rules as for any client.
//
//	p, err := producer.New(producer.Config{URL: "https://sync.example.com", Schema: sc,
//		ClientID: "billing-service", Token: func(context.Context) (string, error) { return token, nil }})
//	res, err := p.Push(ctx, "invoice-42-created",
//		producer.Upsert("invoices", map[string]any{"id": "42", "list_id": "l1", "total": 1200}))
//
// The caller owns the identity of each logical write: a stable ClientID
// for the service and a stable clientCommitId per operation (derive it
// from the work, "invoice-42-created", never from a random value per
// attempt). Push retries transport failures and retryable refusals with
// the same bytes, so a lost response never applies a commit twice: the
// server answers the recorded result (status cached).
package producer

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/syncgo/syncgo/schema"
	"github.com/syncgo/syncgo/wire"
)

// ContentType is the media type of SSP2 requests and responses.
const ContentType = wire.ContentType

// Config configures a Producer.
type Config struct {
	// URL is the server's base URL (its mount): POST URL+"/sync".
	URL string
	// Schema is the schema the rows are encoded for; its version is the
	// requests' schemaVersion.
	Schema *schema.Compiled
	// ClientID is the producer's stable identity in the partition (§2.3).
	ClientID string
	// Token returns the bearer token of each request (nil: none).
	Token func(ctx context.Context) (string, error)
	// HTTPClient sends the requests; nil: http.DefaultClient.
	HTTPClient *http.Client
	// MaxAttempts bounds the sends of one Push (transport failures and
	// retryable refusals); 0 means 5.
	MaxAttempts int
	// MaxBackoff bounds the wait between attempts (a Retry-After answer
	// is honoured up to it); 0 means 10 s.
	MaxBackoff time.Duration
}

// Producer pushes commits. It is safe for concurrent use; it keeps only
// the partition's log epoch.
type Producer struct {
	cfg   Config
	mu    sync.Mutex
	epoch string
}

// New returns a Producer of cfg.
func New(cfg Config) (*Producer, error) {
	switch {
	case cfg.URL == "":
		return nil, errors.New("producer: Config.URL is required")
	case cfg.Schema == nil:
		return nil, errors.New("producer: Config.Schema is required")
	case cfg.ClientID == "":
		return nil, errors.New("producer: Config.ClientID is required")
	}
	cfg.URL = strings.TrimSuffix(cfg.URL, "/")
	if cfg.HTTPClient == nil {
		cfg.HTTPClient = http.DefaultClient
	}
	if cfg.MaxAttempts <= 0 {
		cfg.MaxAttempts = 5
	}
	if cfg.MaxBackoff <= 0 {
		cfg.MaxBackoff = 10 * time.Second
	}
	return &Producer{cfg: cfg}, nil
}

// Op is one operation of a commit: Upsert or Delete builds it.
type Op struct {
	table  string
	rowID  string
	values map[string]any
	delete bool
	base   *int64
}

// Upsert writes the columns of values (column name → Go value: string,
// Go integers, floats, bool, []byte, a JSON-marshalable value for a json
// column, nil for NULL) to the row whose primary key values holds. A new
// row needs every column (nil for NULL); an existing row keeps the columns
// not named.
func Upsert(table string, values map[string]any) Op { return Op{table: table, values: values} }

// Delete deletes a row by its rowId (its primary key's text).
func Delete(table, rowID string) Op { return Op{table: table, rowID: rowID, delete: true} }

// IfVersion makes an upsert conditional: it applies only while the row's
// server version is version (0: the row must not exist yet), and is a
// conflict otherwise (optimistic concurrency, §6.4).
func (o Op) IfVersion(version int64) Op {
	o.base = &version
	return o
}

// Result is a commit's outcome (PUSH_RESULT, §6.3).
type Result struct {
	// Status is applied, cached (a retry of a commit already applied:
	// its recorded result) or rejected.
	Status wire.PushStatus
	// CommitSeq is the commit's sequence in the partition's log (applied
	// and cached).
	CommitSeq int64
	// Results hold one record per operation of a rejected commit
	// (conflicts with the server's row, errors with their codes); none
	// for an applied one.
	Results []wire.OpResult
}

// Error is a request the server refused (an HTTP error answer), or an
// in-band error of its response.
type Error struct {
	Status    int
	Code      string
	Message   string
	Retryable bool
}

func (e *Error) Error() string {
	return fmt.Sprintf("producer: %s (HTTP %d): %s", e.Code, e.Status, e.Message)
}

// Push sends one commit and returns its result, retrying transport
// failures and retryable refusals with backoff (a 401 once, at once, with
// a fresh Token). A rejection (a conflict,
// a forbidden scope, a validator's refusal) is a Result, not an error;
// the error reports a commit whose outcome is unknown after every
// attempt, or one that could not be encoded. Pushing the same
// clientCommitID again with the same operations is safe: an applied
// commit answers cached.
func (p *Producer) Push(ctx context.Context, clientCommitID string, ops ...Op) (Result, error) {
	commit, err := p.encode(clientCommitID, ops)
	if err != nil {
		return Result{}, err
	}
	var last error
	resets, authRetried := 0, false
	for attempt := 1; attempt <= p.cfg.MaxAttempts; attempt++ {
		epoch, err := p.logEpoch(ctx)
		if err == nil {
			var res Result
			var reset bool
			res, reset, err = p.send(ctx, epoch, commit)
			switch {
			case err == nil && reset && resets == 0:
				// The log was reset (a restore): the new epoch is
				// stored; send the commit once more under it.
				resets++
				attempt--
				continue
			case err == nil && reset:
				return Result{}, errors.New("producer: the server asked for a log reset twice")
			case err == nil && !(res.Status == wire.PushRejected && len(res.Results) == 1 && res.Results[0].Retryable):
				return res, nil
			case err == nil:
				err = &Error{Status: http.StatusOK, Code: res.Results[0].Code, Message: res.Results[0].Message, Retryable: true}
			}
		}
		last = err
		var pe *Error
		if errors.As(err, &pe) && pe.Status == http.StatusUnauthorized {
			// Token is asked again once (it may refresh); a second
			// refusal is the caller's to fix.
			if authRetried || attempt == p.cfg.MaxAttempts {
				return Result{}, err
			}
			authRetried = true
			continue
		}
		if errors.As(err, &pe) && !pe.Retryable {
			return Result{}, err
		}
		if attempt == p.cfg.MaxAttempts {
			break
		}
		wait := min(p.cfg.MaxBackoff, time.Duration(1<<min(attempt-1, 10))*200*time.Millisecond)
		var ra retryAfter
		if errors.As(err, &ra) && ra.wait > 0 {
			wait = min(p.cfg.MaxBackoff, ra.wait)
		}
		wait = wait/2 + rand.N(wait/2+1)
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return Result{}, fmt.Errorf("producer: %w (last: %v)", ctx.Err(), last)
		case <-t.C:
		}
	}
	return Result{}, fmt.Errorf("producer: commit %s not confirmed after %d attempts: %w", clientCommitID, p.cfg.MaxAttempts, last)
}

// encode builds the commit's frame once: every attempt sends the same
// bytes (§2.3).
func (p *Producer) encode(clientCommitID string, ops []Op) (*wire.PushCommit, error) {
	if clientCommitID == "" {
		return nil, errors.New("producer: a clientCommitId is required")
	}
	if len(ops) == 0 {
		return nil, errors.New("producer: a commit needs at least one operation")
	}
	pc := &wire.PushCommit{ClientCommitID: clientCommitID}
	for i, o := range ops {
		t, ok := p.cfg.Schema.Table(o.table)
		if !ok {
			return nil, fmt.Errorf("producer: operation %d: the schema has no table %q", i, o.table)
		}
		if o.delete {
			if o.rowID == "" {
				return nil, fmt.Errorf("producer: operation %d: a delete needs a rowId", i)
			}
			pc.Operations = append(pc.Operations, wire.Operation{Table: o.table, RowID: o.rowID, Op: wire.OpDelete})
			continue
		}
		id, payload, err := t.EncodeUpsert(o.values)
		if err != nil {
			return nil, fmt.Errorf("producer: operation %d: %w", i, err)
		}
		pc.Operations = append(pc.Operations, wire.Operation{Table: o.table, RowID: id, Op: wire.OpUpsert, BaseVersion: o.base, Payload: payload})
	}
	return pc, nil
}

// logEpoch returns the partition's log epoch, acquiring it first (a pull
// of no subscriptions, without commits, §2.1).
func (p *Producer) logEpoch(ctx context.Context) (string, error) {
	p.mu.Lock()
	epoch := p.epoch
	p.mu.Unlock()
	if epoch != "" {
		return epoch, nil
	}
	m, err := p.post(ctx, &wire.Request{Version: wire.Version3,
		Header: &wire.ReqHeader{ClientID: p.cfg.ClientID, SchemaVersion: p.cfg.Schema.Version()},
		Pull:   &wire.PullHeader{Accept: wire.AcceptInlineRows}})
	if err != nil {
		return "", err
	}
	if h := header(m); h != nil && h.LogEpoch != "" {
		p.mu.Lock()
		p.epoch = h.LogEpoch
		p.mu.Unlock()
		return h.LogEpoch, nil
	}
	return "", errors.New("producer: the server announced no log epoch")
}

// send pushes the commit under epoch; reset reports a server that asked
// for a log reset (the new epoch is stored).
func (p *Producer) send(ctx context.Context, epoch string, commit *wire.PushCommit) (Result, bool, error) {
	m, err := p.post(ctx, &wire.Request{Version: wire.Version3,
		Header:  &wire.ReqHeader{ClientID: p.cfg.ClientID, SchemaVersion: p.cfg.Schema.Version(), LogEpoch: &epoch},
		Commits: []*wire.PushCommit{commit}})
	if err != nil {
		return Result{}, false, err
	}
	if h := header(m); h != nil && h.RequiredSchemaVersion != nil {
		return Result{}, false, &Error{Status: http.StatusOK, Code: "producer.schema_unsupported",
			Message: fmt.Sprintf("the server does not serve schema version %d (it requires %d)", p.cfg.Schema.Version(), *h.RequiredSchemaVersion)}
	}
	if h := header(m); h != nil && h.ResetRequired {
		p.mu.Lock()
		p.epoch = h.LogEpoch
		p.mu.Unlock()
		return Result{}, true, nil
	}
	for _, f := range m.Frames {
		switch f := f.(type) {
		case *wire.PushResult:
			if f.ClientCommitID == commit.ClientCommitID {
				return Result{Status: f.Status, CommitSeq: f.CommitSeq, Results: f.Results}, false, nil
			}
		case *wire.ErrorFrame:
			return Result{}, false, &Error{Status: http.StatusOK, Code: f.Code, Message: f.Message, Retryable: f.Retryable}
		}
	}
	return Result{}, false, errors.New("producer: the response holds no result for the commit")
}

// retryAfter carries a refusal's Retry-After.
type retryAfter struct {
	err  error
	wait time.Duration
}

func (r retryAfter) Error() string { return r.err.Error() }
func (r retryAfter) Unwrap() error { return r.err }

// post sends one request and decodes its response.
func (p *Producer) post(ctx context.Context, req *wire.Request) (*wire.Message, error) {
	body, err := req.MarshalBinary()
	if err != nil {
		return nil, &Error{Code: "producer.encode", Message: err.Error()} // not retried
	}
	hreq, err := http.NewRequestWithContext(ctx, http.MethodPost, p.cfg.URL+"/sync", bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	hreq.Header.Set("Content-Type", ContentType)
	hreq.Header.Set("Accept", ContentType)
	if p.cfg.Token != nil {
		tok, err := p.cfg.Token(ctx)
		if err != nil {
			return nil, &Error{Code: "producer.token", Message: err.Error()}
		}
		hreq.Header.Set("Authorization", "Bearer "+tok)
	}
	resp, err := p.cfg.HTTPClient.Do(hreq)
	if err != nil {
		return nil, err // transport: retried
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		e := &Error{Status: resp.StatusCode, Retryable: resp.StatusCode == http.StatusTooManyRequests || resp.StatusCode >= 500}
		var body struct {
			Code      string `json:"code"`
			Message   string `json:"message"`
			Retryable *bool  `json:"retryable"`
		}
		if json.Unmarshal(raw, &body) == nil && body.Code != "" {
			e.Code, e.Message = body.Code, body.Message
			if body.Retryable != nil {
				e.Retryable = *body.Retryable
			}
		} else {
			e.Code, e.Message = "http."+strconv.Itoa(resp.StatusCode), strings.TrimSpace(string(raw))
		}
		if s, err := strconv.Atoi(resp.Header.Get("Retry-After")); err == nil && s > 0 {
			return nil, retryAfter{err: e, wait: time.Duration(s) * time.Second}
		}
		return nil, e
	}
	m, err := wire.DecodeMessage(raw, wire.DecoderOptions{Kind: wire.KindResponse})
	if err != nil {
		return nil, fmt.Errorf("producer: decode the response: %w", err)
	}
	return m, nil
}

// header is the response's RESP_HEADER, or nil.
func header(m *wire.Message) *wire.RespHeader {
	if len(m.Frames) > 0 {
		if h, ok := m.Frames[0].(*wire.RespHeader); ok {
			return h
		}
	}
	return nil
}
