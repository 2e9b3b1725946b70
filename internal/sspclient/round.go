package sspclient

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"

	"github.com/syncgo/syncgo/wire"
)

// RoundResult reports one POST /sync round.
type RoundResult struct {
	// LogEpoch is the epoch of RESP_HEADER (wire version 2 and later).
	LogEpoch string
	// ResetRequired reports a header-only epoch response (§2.1): an
	// acquisition when the client had no epoch, a log reset otherwise.
	ResetRequired bool
	// EpochChanged reports that the replica held another epoch and ran
	// the log reset.
	EpochChanged bool
	// RequiredSchemaVersion and LatestSchemaVersion echo RESP_HEADER.
	RequiredSchemaVersion, LatestSchemaVersion *int32
	// Pushed are the PUSH_RESULTs, in request order.
	Pushed []Outcome
	// Sections are the subscription sections, in response order; an
	// aborted section has Complete false.
	Sections []Section
	// ContentEncoding is the response's Content-Encoding.
	ContentEncoding string
}

// Section reports one subscription section of a response.
type Section struct {
	ID        string
	Status    wire.SubStatus
	Reason    string
	Effective wire.ScopeMap
	Bootstrap bool
	// Commits and Changes count the COMMIT frames and their changes.
	Commits, Changes int
	// Segments counts the rows segments applied, inline or referenced;
	// Refs are the SEGMENT_REF descriptors among them.
	Segments int
	Refs     []wire.SegmentRef
	// Rows counts the segment rows applied; Purged the rows removed by a
	// fresh bootstrap's first page or a revocation.
	Rows, Purged int
	// MaxSegmentRows is the most rows one of the segments held.
	MaxSegmentRows int
	// NextCursor and BootstrapState are the SUB_END values; Complete
	// reports that SUB_END was processed and persisted.
	NextCursor     int64
	BootstrapState *string
	Complete       bool
}

// More reports whether the client should pull again at once: after an
// epoch response, a reset, a section that carried commits, or an
// incomplete bootstrap (§4.5, §4.7).
func (r *RoundResult) More() bool {
	if r.ResetRequired {
		return true
	}
	for _, s := range r.Sections {
		if s.Status == wire.SubReset || s.Commits > 0 || s.BootstrapState != nil || !s.Complete {
			return true
		}
	}
	return false
}

// Sync runs one round, and a second one right away when the first was an
// epoch acquisition or a log reset, so that the outbox and the pulls go out
// under the accepted epoch. It returns the last round's result.
func (c *Client) Sync(ctx context.Context) (*RoundResult, error) {
	res, err := c.Round(ctx)
	if err != nil || !res.ResetRequired {
		return res, err
	}
	return c.Round(ctx)
}

// SyncUntilQuiet runs Sync until a round needs no follow-up and the outbox
// is empty, at most maxRounds rounds (0 means 100). It returns every
// round's result.
func (c *Client) SyncUntilQuiet(ctx context.Context, maxRounds int) ([]*RoundResult, error) {
	if maxRounds <= 0 {
		maxRounds = 100
	}
	var all []*RoundResult
	for len(all) < maxRounds {
		res, err := c.Round(ctx)
		if res != nil {
			all = append(all, res)
		}
		if err != nil {
			return all, err
		}
		if !res.More() && c.Pending() == 0 {
			return all, nil
		}
	}
	return all, fmt.Errorf("sspclient: not quiet after %d rounds", maxRounds)
}

// Round runs exactly one POST /sync: the outbox (unless the epoch is still
// to be acquired) and a pull of every subscription that is not revoked.
func (c *Client) Round(ctx context.Context) (*RoundResult, error) {
	c.roundMu.Lock()
	defer c.roundMu.Unlock()
	req, rs := c.buildRequest()
	return c.exchange(ctx, req, rs)
}

// smallBody is the size below which a response's read buffer is sized to
// its Content-Length.
const smallBody = 32 << 10

// sizedReader gives a small uncompressed response (a push result, a
// round's own commit) a read buffer of its size, instead of the 32 KiB
// that wire.NewDecoder would allocate and clear for each response of a
// client pushing in a loop. Other bodies pass as they are.
func sizedReader(resp *http.Response, body io.Reader) io.Reader {
	if resp.Header.Get("Content-Encoding") != "" || resp.ContentLength <= 0 || resp.ContentLength >= smallBody {
		return body
	}
	return bufio.NewReaderSize(body, int(resp.ContentLength))
}

// exchange sends a request and applies its response as it streams in.
func (c *Client) exchange(ctx context.Context, req *wire.Request, rs *roundState) (*RoundResult, error) {
	body, err := req.MarshalBinary()
	if err != nil {
		return nil, fmt.Errorf("sspclient: encode request: %w", err)
	}
	hreq, err := http.NewRequestWithContext(ctx, http.MethodPost, c.base+"/sync", bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	hreq.Header.Set("Content-Type", ContentType)
	c.setCommonHeaders(hreq)
	resp, err := c.opts.HTTPClient.Do(hreq)
	if err != nil {
		return nil, fmt.Errorf("sspclient: sync request: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, readHTTPError(resp)
	}
	rs.res.ContentEncoding = resp.Header.Get("Content-Encoding")
	dec, closeDec, err := decodedBody(resp)
	if err != nil {
		return rs.res, err
	}
	defer closeDec()
	err = rs.read(ctx, wire.NewDecoder(sizedReader(resp, dec), wire.DecoderOptions{Kind: wire.KindResponse, MaxFrameBytes: 256 << 20}))
	return rs.res, err
}

func (c *Client) setCommonHeaders(r *http.Request) {
	if c.token != "" {
		r.Header.Set("Authorization", "Bearer "+c.token)
	}
	r.Header.Set("Accept-Encoding", c.opts.AcceptEncoding)
}

// buildRequest snapshots the replica into a request and the round state
// that will apply its response.
func (c *Client) buildRequest() (*wire.Request, *roundState) {
	c.mu.Lock()
	defer c.mu.Unlock()
	v := c.opts.WireVersion
	h := &wire.ReqHeader{ClientID: c.opts.ClientID, SchemaVersion: c.schema.Version()}
	if v >= wire.Version2 && c.logEpoch != nil {
		epoch := *c.logEpoch
		h.LogEpoch = &epoch
	}
	req := &wire.Request{Version: v, Header: h}
	rs := &roundState{c: c, version: v, res: &RoundResult{}, sent: map[string]*Commit{}, reqSubs: map[string]sentSub{}}
	if v < wire.Version2 || h.LogEpoch != nil {
		ops := 0
		for _, cm := range c.outbox {
			if len(req.Commits) > 0 && ops+len(cm.Operations) > c.opts.MaxOperationsPerRequest {
				break
			}
			ops += len(cm.Operations)
			pc := &wire.PushCommit{ClientCommitID: cm.ID, Operations: make([]wire.Operation, len(cm.Operations))}
			for i, op := range cm.Operations {
				pc.Operations[i] = wire.Operation{Table: op.Table, RowID: op.RowID, Op: op.Op,
					BaseVersion: op.BaseVersion, Payload: op.Payload}
			}
			req.Commits = append(req.Commits, pc)
			rs.sent[cm.ID] = cm
		}
	}
	req.Pull = &wire.PullHeader{LimitCommits: c.opts.LimitCommits, LimitSnapshotRows: c.opts.LimitSnapshotRows,
		MaxSnapshotPages: c.opts.MaxSnapshotPages, Accept: c.opts.Accept}
	for _, s := range c.subs {
		if s.status == wire.SubRevoked {
			continue // §3.3: a revoked subscription is no longer pulled
		}
		sub := &wire.Subscription{ID: s.id, Table: s.table, Scopes: s.scopes, Cursor: s.cursor}
		if s.bootstrapState != nil {
			tok := *s.bootstrapState
			sub.BootstrapState = &tok
		}
		req.Subscriptions = append(req.Subscriptions, sub)
		rs.reqSubs[s.id] = sentSub{cursor: s.cursor, resumed: s.bootstrapState != nil}
	}
	return req, rs
}

// readHTTPError reads a non-200 answer: the §10.1 JSON body when there is
// one.
func readHTTPError(resp *http.Response) error {
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	return newHTTPError(resp.StatusCode, resp.Header.Get("Content-Type"), b)
}
