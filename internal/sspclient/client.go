// Package sspclient is a small SSP2 client for end-to-end tests and load
// tools. It keeps its replica in memory the way a Syncular client keeps
// its SQLite database: a clientId, the accepted log epoch (§2.1), an outbox
// of commits (§7.1), subscriptions with their cursors, resume tokens and
// last effective scopes (§4), and the synced rows of each table with their
// server versions. Sync runs rounds against POST <base>/sync and downloads
// referenced segments from GET <base>/segments/{id} (§5.5).
//
// Failures are returned as errors: an HTTP-level catalog error as an
// *HTTPError, an in-band ERROR frame as a *syncerr.Error, a schema-floor
// response as a *SchemaFloorError. The package has no test dependencies.
package sspclient

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/syncgo/syncgo/schema"
	"github.com/syncgo/syncgo/wire"
)

// ContentType is the content type of SSP2 bodies (§1.1).
const ContentType = wire.ContentType

// Options configure a Client. The zero value of every field means its
// default.
type Options struct {
	// ClientID is the stable client identifier. Default: random.
	ClientID string
	// WireVersion is the wire version spoken: 1, 2 or 3. Default 3.
	WireVersion uint16
	// AcceptEncoding is sent as Accept-Encoding on every request, and the
	// response is decoded by its Content-Encoding (identity, gzip, zstd).
	// Default "zstd, gzip" (§1.3).
	AcceptEncoding string
	// HTTPClient carries the requests. Default http.DefaultClient.
	HTTPClient *http.Client
	// Accept is the PULL_HEADER accept mask. Default inline and external
	// rows segments.
	Accept uint8
	// LimitCommits, LimitSnapshotRows and MaxSnapshotPages are sent in
	// PULL_HEADER; zero asks for the server's defaults.
	LimitCommits, LimitSnapshotRows, MaxSnapshotPages int32
	// MaxOperationsPerRequest bounds the operations a round pushes; a
	// round always sends at least one pending commit. Default 500.
	MaxOperationsPerRequest int
	// Now is the client clock in Unix milliseconds, for the expiry of
	// signed URLs (§5.4). Default: the wall clock.
	Now func() int64
	// RealtimeNetDial, when set, opens the realtime channel's TCP
	// connections (DialRealtime). Default: a net.Dialer.
	RealtimeNetDial func(ctx context.Context, network, addr string) (net.Conn, error)
	// RealtimeDeflate offers permessage-deflate (RFC 7692) on the
	// realtime channel, as browsers do (Chrome's offer); Next inflates
	// the compressed messages of a connection that negotiated it.
	RealtimeDeflate bool
}

func (o Options) withDefaults() Options {
	if o.ClientID == "" {
		o.ClientID = "client-" + randomHex(8)
	}
	if o.WireVersion == 0 {
		o.WireVersion = wire.Version3
	}
	if o.AcceptEncoding == "" {
		o.AcceptEncoding = "zstd, gzip"
	}
	if o.HTTPClient == nil {
		o.HTTPClient = http.DefaultClient
	}
	if o.Accept == 0 {
		o.Accept = wire.AcceptInlineRows | wire.AcceptExternalRows
	}
	if o.MaxOperationsPerRequest <= 0 {
		o.MaxOperationsPerRequest = 500
	}
	if o.Now == nil {
		o.Now = func() int64 { return time.Now().UnixMilli() }
	}
	return o
}

// Client is an in-memory SSP2 client replica. It is safe for concurrent
// use: rounds are serialized, and writes made during a round are sent by
// the next one.
type Client struct {
	base     string
	token    string
	schema   *schema.Compiled
	opts     Options
	idPrefix string

	roundMu sync.Mutex // serializes rounds

	mu       sync.Mutex // guards the replica below
	logEpoch *string
	commitN  uint64
	outbox   []*Commit
	outcomes []Outcome
	subs     []*subscription
	rows     map[string]map[string]Row
	// rowSeq is, by table and row id, the commit sequence of the last
	// change applied to the row, deletes included (see applyChange).
	rowSeq map[string]map[string]int64
	// droppedMark is the highest SUB_END.nextCursor of the deltas that
	// were not applied (-1 before any): see ApplyDelta.
	droppedMark int64
}

// New returns a client of the server mounted at baseURL (the prefix of
// /sync and /segments), authenticating with "Authorization: Bearer token"
// (no header when token is empty), for the client's generated schema s.
func New(baseURL, token string, s *schema.Compiled, opts Options) (*Client, error) {
	if s == nil {
		return nil, errors.New("sspclient: a schema is required")
	}
	opts = opts.withDefaults()
	if !wire.SupportedVersion(opts.WireVersion) {
		return nil, fmt.Errorf("sspclient: unsupported wire version %d", opts.WireVersion)
	}
	c := &Client{
		base: strings.TrimRight(baseURL, "/"), token: token, schema: s, opts: opts,
		idPrefix: randomHex(6), rows: map[string]map[string]Row{}, rowSeq: map[string]map[string]int64{}, droppedMark: -1,
	}
	return c, nil
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// ClientID returns the client's identifier.
func (c *Client) ClientID() string { return c.opts.ClientID }

// WireVersion returns the wire version the client speaks.
func (c *Client) WireVersion() uint16 { return c.opts.WireVersion }

// Schema returns the client's schema.
func (c *Client) Schema() *schema.Compiled { return c.schema }

// LogEpoch returns the accepted log epoch, and false before one was
// acquired (always false at wire version 1).
func (c *Client) LogEpoch() (string, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.logEpoch == nil {
		return "", false
	}
	return *c.logEpoch, true
}

// Rows returns a copy of the synced rows of a table, by rowId.
func (c *Client) Rows(table string) map[string]Row {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make(map[string]Row, len(c.rows[table]))
	for id, r := range c.rows[table] {
		out[id] = r
	}
	return out
}

// Row returns one synced row.
func (c *Client) Row(table, rowID string) (Row, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	r, ok := c.rows[table][rowID]
	return r, ok
}

// Pending returns the number of commits waiting in the outbox.
func (c *Client) Pending() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.outbox)
}

// Outcomes returns the final outcomes recorded so far, oldest first:
// every PUSH_RESULT that removed a commit from the outbox and every local
// drop.
func (c *Client) Outcomes() []Outcome {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]Outcome(nil), c.outcomes...)
}

// Outcome returns the recorded outcome of a commit.
func (c *Client) Outcome(commitID string) (Outcome, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for i := len(c.outcomes) - 1; i >= 0; i-- {
		if c.outcomes[i].CommitID == commitID {
			return c.outcomes[i], true
		}
	}
	return Outcome{}, false
}

// putRow stores a synced row. The caller holds c.mu.
func (c *Client) putRow(table string, r Row) {
	m := c.rows[table]
	if m == nil {
		m = map[string]Row{}
		c.rows[table] = m
	}
	m[r.ID] = r
}

// applyChange applies a change of the commit at seq. Each subscription is
// its own unit of progress (§1.4), while a row id is one row whatever its
// scopes: a row that moves between two subscriptions' scopes (deleted in
// one, inserted again in the other) reaches the client in two sections
// that may lag each other, so
//   - a change of an earlier commit than the last one applied to the row
//     (deletes included) is stale and skipped, and
//   - a delete whose stored scopes are not the local row's names another
//     incarnation of the row (the one the other section replaced in the
//     same commit) and is skipped.
//
// The caller holds c.mu.
func (c *Client) applyChange(table string, seq int64, r Row, del bool, scopes wire.StoredScopes) {
	m := c.rowSeq[table]
	if m == nil {
		m = map[string]int64{}
		c.rowSeq[table] = m
	}
	if last, ok := m[r.ID]; ok && seq < last {
		return
	}
	if del {
		if local, ok := c.rows[table][r.ID]; ok && len(scopes) > 0 {
			t, _ := c.schema.Table(table)
			sm := make(wire.ScopeMap, len(scopes))
			for i, sc := range scopes {
				sm[i] = wire.ScopeValues{Key: sc.Key, Values: []string{sc.Value}}
			}
			if t != nil && !matchesScopes(t, local.Values, sm) {
				return
			}
		}
		m[r.ID] = seq
		delete(c.rows[table], r.ID)
		return
	}
	m[r.ID] = seq
	c.putRow(table, r)
}

// purge deletes the rows of a table inside scopes (§3.3) and returns how
// many went. The caller holds c.mu.
func (c *Client) purge(t *schema.CompiledTable, scopes wire.ScopeMap) int {
	n := 0
	for id, r := range c.rows[t.Name()] {
		if matchesScopes(t, r.Values, scopes) {
			delete(c.rows[t.Name()], id)
			n++
		}
	}
	return n
}
