package engine

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/syncgo/syncgo/store"
	"github.com/syncgo/syncgo/wire"
)

// page is one built bootstrap page: an SSG2 rows segment.
type page struct {
	id       string
	bytes    []byte
	rowCount int
	last     *string // the last row id, when more rows follow
}

// pageKey identifies a page for reuse across clients (§5.1): everything
// its bytes depend on.
type pageKey struct {
	partition, epoch, table, digest string
	schemaVersion                   int32
	asOf                            int64
	after                           string
	hasAfter                        bool
	limit                           int
}

// pageCache shares built pages and coalesces concurrent builds.
type pageCache struct {
	mu    sync.Mutex
	pages map[pageKey]*pageEntry
	order []pageKey
	max   int

	hits, misses atomic.Int64 // look-ups that found an entry, or built one
}

type pageEntry struct {
	done chan struct{}
	p    page
	err  error
}

func (c *pageCache) get(key pageKey, build func() (page, error)) (page, error) {
	c.mu.Lock()
	if c.pages == nil {
		c.pages = map[pageKey]*pageEntry{}
	}
	if e, ok := c.pages[key]; ok {
		c.mu.Unlock()
		c.hits.Add(1)
		<-e.done
		return e.p, e.err
	}
	e := &pageEntry{done: make(chan struct{})}
	c.pages[key] = e
	c.order = append(c.order, key)
	for len(c.order) > c.max {
		delete(c.pages, c.order[0])
		c.order = c.order[1:]
	}
	c.mu.Unlock()
	c.misses.Add(1)
	e.p, e.err = build()
	close(e.done)
	if e.err != nil {
		c.mu.Lock()
		if c.pages[key] == e {
			delete(c.pages, key)
		}
		c.mu.Unlock()
	}
	return e.p, e.err
}

// bootstrap serves a bootstrapping subscription (§4.7): pinned, paged and
// resumable, in rows segments, or as one sqlite image (§5.3).
func (r *request) bootstrap(ctx context.Context, sub *wire.Subscription, eff wire.ScopeMap, p store.Partition, lim pullLimits) (int64, error) {
	tok, ok := parseToken(sub.BootstrapState, sub.Table, p)
	asOf, after := p.MaxCommitSeq, (*string)(nil)
	if ok {
		asOf, after = tok.AsOfCommitSeq, tok.RowCursor
	}
	digest := wire.ScopeDigest(scopeMapToMap(eff))
	t, current, _ := r.tables(sub.Table)
	layout := pageLayout{table: sub.Table, schemaVersion: r.cs.Version(), cols: t.WireColumns()}
	if r.old() {
		layout.narrow = func(p []byte) ([]byte, error) { return narrowPayload(current, t, p) }
	}
	if err := r.enc.Encode(&wire.SubStart{ID: sub.ID, Status: wire.SubActive, EffectiveScopes: eff, Bootstrap: true}); err != nil {
		return 0, err
	}
	// probe is the first rows page (with a look-ahead row) when the sqlite
	// lane read it and left the table to the rows lane.
	var probe *[]store.Row
	if r.sqliteEligible(t, after) {
		if !ok {
			pin, err := r.scopePin(ctx, sub.Table, eff, p)
			if err != nil {
				return 0, err
			}
			asOf = pin
		}
		served, first, err := r.sqliteLane(ctx, t, eff, lim, asOf, digest, p.LogEpoch)
		if err != nil {
			return 0, err
		}
		if served {
			// The image is the whole table: it completes the bootstrap.
			return asOf, r.enc.Encode(&wire.SubEnd{NextCursor: asOf})
		}
		probe = first
	}
	accept := r.req.Pull.Accept
	complete := false
	// The segment store write of a page by reference runs while the next
	// page is built; its SEGMENT_REF goes out when the write has landed,
	// before anything of the next page, so a descriptor never names a
	// segment the store does not hold yet.
	var inflight *pendingRef
	defer func() { inflight.wait() }()
	for n := 0; n < lim.pages; n++ {
		key := pageKey{partition: r.auth.Partition, epoch: p.LogEpoch, table: sub.Table, digest: digest,
			schemaVersion: r.cs.Version(), asOf: asOf, limit: lim.rows}
		if after != nil {
			key.after, key.hasAfter = *after, true
		}
		pg, err := r.e.pages.get(key, func() (page, error) {
			if n == 0 && probe != nil {
				return encodePage(layout, *probe, lim.rows)
			}
			return r.e.buildPage(ctx, r.auth.Partition, layout, eff, after, lim.rows)
		})
		if err != nil {
			return 0, err
		}
		if err := r.finishRef(inflight); err != nil {
			return 0, err
		}
		inflight = nil
		inline := accept&wire.AcceptInlineRows != 0 &&
			(len(pg.bytes) <= r.e.cfg.Limits.InlineSegmentMaxBytes || accept&wire.AcceptExternalRows == 0)
		if inline {
			if err := r.enc.Encode(&wire.SegmentInline{Payload: pg.bytes}); err != nil {
				return 0, err
			}
		} else {
			inflight = r.startRef(ctx, sub.Table, pg, after, asOf, digest, p.LogEpoch)
		}
		after = pg.last
		if pg.last == nil {
			complete = true
			break
		}
	}
	if err := r.finishRef(inflight); err != nil {
		return 0, err
	}
	inflight = nil
	end := &wire.SubEnd{NextCursor: asOf}
	if !complete {
		b, err := json.Marshal(bootstrapToken{AsOfCommitSeq: asOf, Tables: []string{sub.Table}, TableIndex: 0, RowCursor: after})
		if err != nil {
			return 0, err
		}
		s := string(b)
		end.BootstrapState = &s
	}
	return asOf, r.enc.Encode(end)
}

// pendingRef is a page by reference whose segment store write is in
// flight.
type pendingRef struct {
	pg   page
	ref  *wire.SegmentRef
	done chan struct{}
	err  error
}

// wait waits for the write; a nil pendingRef has none.
func (p *pendingRef) wait() {
	if p != nil {
		<-p.done
	}
}

// startRef starts the segment store write of a page served by reference.
func (r *request) startRef(ctx context.Context, table string, pg page, after *string, asOf int64, digest, epoch string) *pendingRef {
	now := r.e.cfg.Now()
	pub := Publication{Partition: r.auth.Partition, LogEpoch: epoch, Table: table,
		SchemaVersion: r.cs.Version(), MediaType: wire.MediaRows, ScopeDigest: digest,
		AsOfCommitSeq: asOf, RowCursor: after, NextRowCursor: pg.last, RowCount: int64(pg.rowCount),
		CreatedAtMs: now, ExpiresAtMs: now + r.e.cfg.Limits.SegmentTTL.Milliseconds()}
	ref := &wire.SegmentRef{SegmentID: pg.id, MediaType: wire.MediaRows, Table: table,
		ByteLength: int64(len(pg.bytes)), RowCount: int64(pg.rowCount), AsOfCommitSeq: asOf,
		ScopeDigest: digest, RowCursor: after, NextRowCursor: pg.last}
	p := &pendingRef{pg: pg, ref: ref, done: make(chan struct{})}
	go func() {
		defer close(p.done)
		p.err = r.e.publish(ctx, pg.id, pg.bytes, pub)
	}()
	return p
}

// finishRef waits for a page's segment store write and writes its
// SEGMENT_REF, or, when the store is full and the client accepts inline
// segments, the page inline (a segment is a cache entry: a full store
// does not fail the bootstrap). A nil pendingRef writes nothing.
func (r *request) finishRef(p *pendingRef) error {
	if p == nil {
		return nil
	}
	p.wait()
	if p.err != nil {
		if errors.Is(p.err, store.ErrStorageFull) && r.req.Pull.Accept&wire.AcceptInlineRows != 0 {
			return r.enc.Encode(&wire.SegmentInline{Payload: p.pg.bytes})
		}
		return p.err
	}
	if err := r.signRef(p.ref); err != nil {
		return err
	}
	return r.enc.Encode(p.ref)
}

// signRef gives a descriptor its signed URL when the client accepts one
// (accept bit 3) and the host configured signed URLs (§5.4). It runs
// inside the pull, after the scopes were resolved for the subscription.
func (r *request) signRef(ref *wire.SegmentRef) error {
	if r.e.cfg.URLs == nil || r.req.Pull == nil || r.req.Pull.Accept&wire.AcceptSignedURLs == 0 {
		return nil
	}
	u, exp, err := r.e.cfg.URLs.SegmentURL(ref.SegmentID, r.auth.Partition, ref.ScopeDigest, r.e.cfg.Now())
	if err != nil {
		return fmt.Errorf("sign segment url: %w", err)
	}
	ref.URL, ref.URLExpiresAtMs = &u, exp
	return nil
}

// pageLayout is what a page's bytes are encoded for: the client's schema
// version and columns, and the projection of stored rows into them.
type pageLayout struct {
	table         string
	schemaVersion int32
	cols          []wire.Column
	narrow        func([]byte) ([]byte, error) // nil: stored rows as they are
}

// buildPage scans one page of rows and encodes it as an SSG2 segment.
func (e *Engine) buildPage(ctx context.Context, partition string, l pageLayout, eff wire.ScopeMap, after *string, limit int) (page, error) {
	table := l.table
	rows, err := e.cfg.Store.ScanRows(ctx, partition, store.RowScanQuery{Table: table, Scopes: eff, After: after, Limit: limit + 1, NoScopes: true})
	if err != nil {
		return page{}, err
	}
	return encodePage(l, rows, limit)
}

// encodePage encodes the rows of a page scan (limit rows and a look-ahead
// row when more follow) as an SSG2 segment.
func encodePage(l pageLayout, rows []store.Row, limit int) (page, error) {
	var pg page
	if len(rows) > limit {
		rows = rows[:limit]
		last := rows[limit-1].RowID
		pg.last = &last
	}
	var buf bytes.Buffer
	sw, err := wire.NewSegmentWriter(&buf, wire.SegmentHeader{Table: l.table, SchemaVersion: l.schemaVersion, Columns: l.cols})
	if err != nil {
		return page{}, err
	}
	for _, row := range rows {
		payload := row.Payload
		if l.narrow != nil {
			var err error
			if payload, err = l.narrow(payload); err != nil {
				return page{}, fmt.Errorf("segment row %s: %w", row.RowID, err)
			}
		}
		if err := sw.WriteRow(row.ServerVersion, payload); err != nil {
			return page{}, fmt.Errorf("segment row %s: %w", row.RowID, err)
		}
	}
	if err := sw.Close(); err != nil {
		return page{}, err
	}
	pg.bytes, pg.rowCount = buf.Bytes(), len(rows)
	sum := sha256.Sum256(pg.bytes)
	pg.id = "sha256:" + hex.EncodeToString(sum[:])
	return pg, nil
}
