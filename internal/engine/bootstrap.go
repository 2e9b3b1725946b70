package engine

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/syncgo/syncgo/store"
	"github.com/syncgo/syncgo/wire"
)

// page is one built bootstrap page: an SSG2 rows segment.
type page struct {
	id       string
	bytes    []byte
	rowCount int
	last     *string // the last row id, when more rows follow
	// cut: a planned page whose range held more rows than the limit (rows
	// written since its boundary was walked) ends at the limit, before
	// its boundary; the plan's later pages do not follow it.
	cut bool
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
	// through, with hasThrough, ends a page at a known boundary (the rows
	// after `after` through this row id, however many): a page of a plan
	// built ahead (pagePlan). Without it the page is the limit rows after
	// `after`.
	through    string
	hasThrough bool
}

// sharedCache shares built values (pages, page boundaries) across
// requests and coalesces concurrent builds of one key; the oldest keys are
// forgotten first, and a failed build is not kept.
type sharedCache[K comparable, V any] struct {
	mu    sync.Mutex
	m     map[K]*sharedEntry[V]
	order []K
	max   int
	// size, when set, is the bytes a built value holds: the values kept
	// hold at most maxBytes together (the oldest go first), whatever their
	// count. bytes is their sum.
	size     func(V) int
	maxBytes int
	bytes    int

	hits, misses atomic.Int64 // look-ups that found an entry, or built one
}

type sharedEntry[V any] struct {
	done  chan struct{}
	v     V
	err   error
	bytes int // size(v), once counted in the cache's bytes
}

// get returns key's value, building it with build unless it is built or
// building. A build fails with its builder's context: a waiter that did
// not start it (another request) builds again rather than fail with that
// request's cancellation (a client gone, a plan stopped).
func (c *sharedCache[K, V]) get(key K, build func() (V, error)) (V, error) {
	for {
		v, err, again := c.getOnce(key, build)
		if !again {
			return v, err
		}
	}
}

// evictOldestLocked forgets the oldest key. c.mu is held.
func (c *sharedCache[K, V]) evictOldestLocked() {
	if e, ok := c.m[c.order[0]]; ok {
		c.bytes -= e.bytes
		delete(c.m, c.order[0])
	}
	c.order = c.order[1:]
}

// getOnce is one look-up; again reports a waited build that failed with
// its builder's cancellation.
func (c *sharedCache[K, V]) getOnce(key K, build func() (V, error)) (V, error, bool) {
	c.mu.Lock()
	if c.m == nil {
		c.m = map[K]*sharedEntry[V]{}
	}
	if e, ok := c.m[key]; ok {
		c.mu.Unlock()
		c.hits.Add(1)
		<-e.done
		if errors.Is(e.err, context.Canceled) || errors.Is(e.err, context.DeadlineExceeded) {
			return e.v, e.err, true
		}
		return e.v, e.err, false
	}
	e := &sharedEntry[V]{done: make(chan struct{})}
	c.m[key] = e
	c.order = append(c.order, key)
	for len(c.order) > c.max {
		c.evictOldestLocked()
	}
	c.mu.Unlock()
	c.misses.Add(1)
	e.v, e.err = build()
	if e.err != nil {
		// Forgotten before the waiters wake, so that a retry builds anew.
		c.mu.Lock()
		if c.m[key] == e {
			delete(c.m, key)
		}
		c.mu.Unlock()
	} else if c.size != nil {
		n := c.size(e.v)
		c.mu.Lock()
		if c.m[key] == e {
			e.bytes = n
			c.bytes += n
			for c.bytes > c.maxBytes && len(c.order) > 0 {
				c.evictOldestLocked()
			}
		}
		c.mu.Unlock()
	}
	close(e.done)
	return e.v, e.err, false
}

// pageCache shares built pages and coalesces concurrent builds.
type pageCache = sharedCache[pageKey, page]

// pageCacheBytes bounds the bytes of the pages kept: a page's key holds
// the client's page limit (up to 50,000 rows), so a client that varies it
// makes a new page each time.
const pageCacheBytes = 32 << 20

func pageBytes(p page) int { return len(p.bytes) }

// boundsKey identifies the page boundaries of a scan: those of the pages
// that would follow key's after cursor, at most pages of them.
type boundsKey struct {
	pageKey
	pages int
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
	// pages are built; its SEGMENT_REF goes out when the write has landed,
	// before anything of a later page, so a descriptor never names a
	// segment the store does not hold yet.
	refs := &refQueue{r: r}
	defer refs.wait()
	base := pageKey{partition: r.auth.Partition, epoch: p.LogEpoch, table: sub.Table, digest: digest,
		schemaVersion: r.cs.Version(), asOf: asOf, limit: lim.rows}
	// The pages still to serve are built ahead of the response: on a
	// store that chains its pages (store.PageChainer) one after another;
	// otherwise, with one scope key, planned from the scope index (their
	// boundaries) and built concurrently. The plan's pages are served in
	// order, and a plan that ends early (rows written since the walk)
	// leaves the rest to the page-by-page loop.
	c, chained := r.e.cfg.Store.(store.PageChainer)
	chained = chained && c.ChainPages()
	var plan *pagePlan
	defer func() { plan.stop() }()
	planned := false
	for n := 0; n < lim.pages; n++ {
		if !planned && (chained || len(eff) == 1) && lim.pages-n > 1 && !(n == 0 && probe != nil) {
			planned = true
			if chained {
				plan = r.e.chainPages(ctx, base, layout, eff, after, lim.pages-n)
			} else {
				plan = r.e.planPages(ctx, base, layout, eff, after, lim.pages-n)
			}
		}
		// While the plan builds this page, the descriptors of the pages
		// before it go out as their segments land.
		if err := refs.await(plan); err != nil {
			return 0, err
		}
		pg, took, err := plan.take()
		switch {
		case !took:
			plan.stop()
			plan = nil
		case err == nil && pg.cut:
			// The rest of the plan starts at a boundary this page did
			// not reach: the pages after it are built one by one.
			plan.stop()
			plan = nil
		}
		if !took {
			key := base
			if after != nil {
				key.after, key.hasAfter = *after, true
			}
			pg, err = r.e.pages.get(key, func() (page, error) {
				if n == 0 && probe != nil {
					return encodePage(layout, *probe, lim.rows)
				}
				return r.e.buildPage(ctx, r.auth.Partition, layout, eff, after, lim.rows)
			})
		}
		if err != nil {
			return 0, err
		}
		inline := accept&wire.AcceptInlineRows != 0 &&
			(len(pg.bytes) <= r.e.cfg.Limits.InlineSegmentMaxBytes || accept&wire.AcceptExternalRows == 0)
		if inline {
			if err := refs.drain(); err != nil {
				return 0, err
			}
			if err := r.enc.Encode(&wire.SegmentInline{Payload: pg.bytes}); err != nil {
				return 0, err
			}
		} else if err := refs.add(r.startRef(ctx, sub.Table, pg, after, asOf, digest, p.LogEpoch)); err != nil {
			return 0, err
		}
		after = pg.last
		if pg.last == nil {
			complete = true
			break
		}
	}
	if err := refs.drain(); err != nil {
		return 0, err
	}
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

// refQueue is a response's page by reference whose descriptor is not
// written yet. Its segment store write runs while the next pages are
// built, one write at a time (two at a time was no faster once a write is
// one statement, BENCHMARKS.md "Round twenty-six"), and the descriptor
// is written as soon as the write has landed. The response is flushed
// when it would otherwise wait, for a page being built or a write in
// flight: a client that reads the response as it comes then fetches each
// segment while the next pages are built, and a response whose pages are
// built already (a warm bootstrap) goes out in one piece.
type refQueue struct {
	r        *request
	inflight *pendingRef
	// unflushed: a descriptor was written since the last flush.
	unflushed bool
}

// await writes the descriptor if its write lands before the plan's next
// page is built, flushing the response while it waits for either;
// without a plan it writes the descriptor if its write has landed.
func (q *refQueue) await(plan *pagePlan) error {
	next := plan.ready()
	for {
		if q.inflight != nil && closed(q.inflight.done) {
			if err := q.finish(); err != nil {
				return err
			}
		}
		if next == nil || closed(next) {
			return nil
		}
		var write <-chan struct{}
		if q.inflight != nil {
			write = q.inflight.done
		}
		if err := q.waitFor(next, write); err != nil {
			return err
		}
	}
}

// flushAfter is how long a response waits for a page or a segment write
// before it flushes what it holds: the pages of a warm bootstrap (built
// already, taken from the page cache) come within it, and the response
// goes out in one piece, verified once.
const flushAfter = time.Millisecond

// waitFor waits until a or b (nil: never) is closed, flushing the
// response if that takes longer than flushAfter.
func (q *refQueue) waitFor(a, b <-chan struct{}) error {
	if q.unflushed {
		t := time.NewTimer(flushAfter)
		select {
		case <-a:
			t.Stop()
			return nil
		case <-b:
			t.Stop()
			return nil
		case <-t.C:
		}
		if err := q.flush(); err != nil {
			return err
		}
	}
	select {
	case <-a:
	case <-b:
	}
	return nil
}

// add writes the pending descriptor (after its write) and keeps p's.
func (q *refQueue) add(p *pendingRef) error {
	if err := q.finish(); err != nil {
		return err
	}
	q.inflight = p
	return nil
}

// drain writes the pending descriptor, after its write (the response
// goes on with a page inline or ends).
func (q *refQueue) drain() error { return q.finish() }

// finish writes the pending descriptor after its write, flushing the
// response while it waits for the write.
func (q *refQueue) finish() error {
	p := q.inflight
	if p == nil {
		return nil
	}
	if err := q.waitFor(p.done, nil); err != nil {
		return err
	}
	q.inflight = nil
	q.unflushed = true
	return q.r.finishRef(p)
}

func (q *refQueue) flush() error {
	if !q.unflushed {
		return nil
	}
	q.unflushed = false
	return q.r.flush()
}

// wait waits for a write still pending (a response that failed).
func (q *refQueue) wait() { q.inflight.wait() }

// closed reports whether c is closed, without waiting.
func closed(c <-chan struct{}) bool {
	select {
	case <-c:
		return true
	default:
		return false
	}
}

// Flusher is a Responder that can send what a response holds before it
// ends. A bootstrap flushes the SEGMENT_REFs it wrote when it has to wait
// for its next page (refQueue), so that a client that reads the response
// as it comes fetches each segment while the next pages are built,
// instead of all of them after the response.
type Flusher interface {
	Flush() error
}

// flush sends what the response holds so far, when the transport can.
func (r *request) flush() error {
	f, ok := r.resp.(Flusher)
	if !ok {
		return nil
	}
	if err := r.enc.Flush(); err != nil {
		return err
	}
	return f.Flush()
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
	if v, ok := e.cfg.Store.(store.RowVisitor); ok {
		return e.visitPage(ctx, v, partition, l, store.RowScanQuery{Table: table, Scopes: eff, After: after, Limit: limit + 1, NoScopes: true}, limit, nil)
	}
	rows, err := e.cfg.Store.ScanRows(ctx, partition, store.RowScanQuery{Table: table, Scopes: eff, After: after, Limit: limit + 1, NoScopes: true})
	if err != nil {
		return page{}, err
	}
	return encodePage(l, rows, limit)
}

// buildRangePage scans the rows after `after` through `through` (a page
// boundary) and encodes them as an SSG2 segment whose cursor is through,
// or, when the range now holds more than limit rows (rows written since
// the boundaries were walked), the first limit of them (page.cut).
func (e *Engine) buildRangePage(ctx context.Context, partition string, l pageLayout, eff wire.ScopeMap, after *string, through string, limit int) (page, error) {
	if v, ok := e.cfg.Store.(store.RowVisitor); ok {
		return e.visitPage(ctx, v, partition, l, store.RowScanQuery{Table: l.table, Scopes: eff, After: after, Limit: limit + 1, NoScopes: true}, limit, &through)
	}
	var rows []store.Row
	for {
		batch, err := e.cfg.Store.ScanRows(ctx, partition, store.RowScanQuery{Table: l.table, Scopes: eff, After: after, Limit: limit + 1, NoScopes: true})
		if err != nil {
			return page{}, err
		}
		if rows == nil {
			// The usual case: the first scan reaches past through
			// within the limit, and the page is a prefix of it.
			k, found := slices.BinarySearchFunc(batch, through, func(r store.Row, id string) int { return strings.Compare(r.RowID, id) })
			if found {
				k++
			}
			if k <= limit {
				return encodeRows(l, batch[:k], &through)
			}
		}
		for _, row := range batch {
			if row.RowID > through {
				return encodeRows(l, rows, &through)
			}
			if len(rows) == limit {
				// A page holds at most limit rows (§4.7): this one ends
				// here, and the response leaves the plan.
				last := rows[limit-1].RowID
				pg, err := encodeRows(l, rows, &last)
				pg.cut = true
				return pg, err
			}
			rows = append(rows, row)
		}
		if len(batch) <= limit {
			return encodeRows(l, rows, &through)
		}
		after = &batch[len(batch)-1].RowID
	}
}

// visitFirstRows is the rows a visited page has room for before it grows
// to a full page.
const visitFirstRows = 16

// visitPage builds a page as buildPage (through nil) or buildRangePage
// (through set) do, encoding each row as the store visits it (q reads
// limit rows and a look-ahead row): the page holds the rows up to limit;
// with through, those up to through, and when more than limit rows lie
// before it, the first limit of them (cut). The bytes are encodeRows'.
func (e *Engine) visitPage(ctx context.Context, v store.RowVisitor, partition string, l pageLayout, q store.RowScanQuery, limit int, through *string) (page, error) {
	per := e.pageRowBytes.Load()
	if per <= 0 {
		per = 128
	}
	per += per / 8
	// Room for the first visitFirstRows rows (an empty or small page,
	// every section of a request with many subscriptions, allocates
	// little), then for 16 times as many at each step up to a full page,
	// sized by the last page's bytes per row and an eighth more: a full
	// page copies its first 256 rows on the way, not its bytes at each
	// doubling. A page that ends well short of its room is trimmed.
	next := min(limit, visitFirstRows)
	if through != nil {
		// A page between walked boundaries holds limit rows unless rows
		// were written since: room for all of them at once.
		next = limit
	}
	sw, err := wire.NewSegmentAppender(make([]byte, 0, 1024+len(l.cols)*32+int(per)*next), wire.SegmentHeader{Table: l.table, SchemaVersion: l.schemaVersion, Columns: l.cols})
	if err != nil {
		return page{}, err
	}
	var (
		n        int
		lastID   []byte
		more     bool
		rowErr   error
		rowBytes int
	)
	err = v.VisitRows(ctx, partition, q, func(r *store.Row) bool {
		if through != nil && r.RowID > *through {
			return false
		}
		if n == limit {
			more = true
			return false
		}
		payload := r.Payload
		if l.narrow != nil {
			if payload, rowErr = l.narrow(payload); rowErr != nil {
				rowErr = fmt.Errorf("segment row %s: %w", r.RowID, rowErr)
				return false
			}
		}
		// As encodeRows: the framing of a stored row checked, not its
		// contents.
		if rowErr = sw.WriteStoredRow(r.ServerVersion, payload); rowErr != nil {
			rowErr = fmt.Errorf("segment row %s: %w", r.RowID, rowErr)
			return false
		}
		rowBytes += len(payload) + 8
		lastID = append(lastID[:0], r.RowID...)
		n++
		if n == next && limit > n {
			next = min(limit, n*16)
			sw.Grow(int(per) * (next - n))
		}
		return true
	})
	if err == nil {
		err = rowErr
	}
	if err != nil {
		return page{}, err
	}
	if err := sw.Close(); err != nil {
		return page{}, err
	}
	pg := page{rowCount: n}
	switch {
	case more:
		// limit rows and another one (before through): the page ends at
		// its last row; with through, the plan's page is cut there.
		last := string(lastID)
		pg.last, pg.cut = &last, through != nil
	case through != nil:
		last := *through
		pg.last = &last
	}
	if n > 0 {
		e.pageRowBytes.Store(int64(rowBytes / n))
	}
	pg.bytes = sw.Bytes()
	if cap(pg.bytes)-len(pg.bytes) > len(pg.bytes)/4+4096 {
		pg.bytes = slices.Clone(pg.bytes) // kept by the page cache
	}
	sum := sha256.Sum256(pg.bytes)
	pg.id = "sha256:" + hex.EncodeToString(sum[:])
	return pg, nil
}

// encodePage encodes the rows of a page scan (limit rows and a look-ahead
// row when more follow) as an SSG2 segment.
func encodePage(l pageLayout, rows []store.Row, limit int) (page, error) {
	var last *string
	if len(rows) > limit {
		rows = rows[:limit]
		id := rows[limit-1].RowID
		last = &id
	}
	return encodeRows(l, rows, last)
}

// encodeRows encodes rows as an SSG2 segment whose next cursor is last
// (nil: the last page).
func encodeRows(l pageLayout, rows []store.Row, last *string) (page, error) {
	pg := page{last: last}
	// The segment is about the rows' payloads and a version each: sized
	// once, not grown by doubling (a page is hundreds of KB).
	size := 1024 + len(l.cols)*32
	for _, row := range rows {
		size += len(row.Payload) + 10
	}
	// Built in place: each block is appended to the segment's slice, not
	// staged and copied.
	sw, err := wire.NewSegmentAppender(make([]byte, 0, size), wire.SegmentHeader{Table: l.table, SchemaVersion: l.schemaVersion, Columns: l.cols})
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
		// Stored payloads were encoded and checked by this codec when
		// they were written (a narrowed one just now): only their framing
		// is checked again, which still refuses a row of another layout
		// (a concurrent migration's; the serve gate explains it).
		if err := sw.WriteStoredRow(row.ServerVersion, payload); err != nil {
			return page{}, fmt.Errorf("segment row %s: %w", row.RowID, err)
		}
	}
	if err := sw.Close(); err != nil {
		return page{}, err
	}
	pg.bytes, pg.rowCount = sw.Bytes(), len(rows)
	sum := sha256.Sum256(pg.bytes)
	pg.id = "sha256:" + hex.EncodeToString(sum[:])
	return pg, nil
}

// pagePlan is the pages of a bootstrap still to serve, their boundaries
// walked from the scope index ahead (store.PageBoundaries), built
// concurrently (at most planParallel at a time, started in order as the
// walk finds their boundaries) and taken in order. The last page of a
// plan that found fewer boundaries than pages is an ordinary page (limit
// rows after the last boundary).
type pagePlan struct {
	// jobs has a slot per page the plan may hold; those after the walk's
	// last page end absent.
	jobs []*planJob
	next int
	// sem holds a slot per page started and not taken yet: a plan keeps
	// at most planParallel pages built ahead of the response.
	sem    chan struct{}
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

type planJob struct {
	done   chan struct{}
	slot   bool // it holds a slot of the plan's sem (set before it starts)
	absent bool // the walk ended before this page: the plan has no more
	pg     page
	err    error
}

// planParallel bounds the pages a plan builds at once, or holds built and
// not yet written: the scans share the CPUs and the store's read
// connections with every other request.
func planParallel() int { return min(runtime.GOMAXPROCS(0), 4) }

// walkBoundaries hands the boundaries of q to found as the store's walk
// finds them (store.BoundaryWalker), or all at once after it.
func (e *Engine) walkBoundaries(ctx context.Context, partition string, q store.RowScanQuery, pages int, found func(string)) error {
	if w, ok := e.cfg.Store.(store.BoundaryWalker); ok {
		return w.WalkPageBoundaries(ctx, partition, q, pages, found)
	}
	bounds, err := e.cfg.Store.PageBoundaries(ctx, partition, q, pages)
	for _, b := range bounds {
		found(b)
	}
	return err
}

// planPages plans the pages after `after`, at most pages of them. It does
// not wait for the walk: each page starts as soon as its boundaries are
// known (the first at once), and take waits for them.
func (e *Engine) planPages(ctx context.Context, base pageKey, l pageLayout, eff wire.ScopeMap, after *string, pages int) *pagePlan {
	bk := boundsKey{pageKey: base, pages: pages}
	if after != nil {
		bk.after, bk.hasAfter = *after, true
	}
	p, ctx := newPagePlan(ctx, pages)
	// The first page does not wait for the walk: it is built meanwhile as
	// an ordinary page (the limit rows after `after`, the key the
	// page-by-page loop would build), and it is the plan's first page when
	// it ends at the first boundary, or when the walk finds none;
	// otherwise (rows written since) the plan builds its own.
	firstKey := base
	if after != nil {
		firstKey.after, firstKey.hasAfter = *after, true
	}
	buildFirst := func() (page, error) {
		return e.pages.get(firstKey, func() (page, error) {
			return e.buildPage(ctx, base.partition, l, eff, after, base.limit)
		})
	}
	first := make(chan struct{})
	var (
		firstPg  page
		firstErr error
	)
	// The walk: its boundaries go to the scheduler as they are found.
	// Walked boundaries are kept for other clients (e.bounds); a client
	// that finds them kept or being walked gets them all at once.
	bounds := make(chan string, pages) // never blocks the walk
	var walkErr error                  // set before bounds closes
	p.wg.Add(3)
	go func() {
		defer p.wg.Done()
		defer close(first)
		firstPg, firstErr = buildFirst()
	}()
	go func() {
		defer p.wg.Done()
		defer close(bounds)
		streamed := false
		all, err := e.bounds.get(bk, func() ([]string, error) {
			streamed = true
			var out []string
			err := e.walkBoundaries(ctx, base.partition, store.RowScanQuery{Table: l.table, Scopes: eff, After: after, Limit: base.limit}, pages,
				func(id string) {
					if len(out) < pages {
						out = append(out, id)
						bounds <- id
					}
				})
			return out, err
		})
		if err != nil {
			walkErr = err
			return
		}
		if !streamed {
			for _, b := range all[:min(len(all), pages)] {
				bounds <- b
			}
		}
	}()
	// The scheduler: page i starts once its boundary is walked (or the
	// walk ended: the plan's last page is then an ordinary one) and a slot
	// is free.
	go func() {
		defer p.wg.Done()
		from := after
		i := 0
		defer func() { p.endFrom(i) }()
		for ; i < len(p.jobs); i++ {
			j := p.jobs[i]
			key := base
			if from != nil {
				key.after, key.hasAfter = *from, true
			}
			var through *string
			if b, ok := <-bounds; ok {
				through = &b
				key.through, key.hasThrough = b, true
			} else if walkErr != nil {
				j.err = walkErr
				close(j.done)
				i++
				return
			}
			if !p.acquire(ctx, j) {
				i++
				return
			}
			p.wg.Add(1)
			go func(i int, pageAfter *string) {
				defer p.wg.Done()
				defer close(j.done)
				if i == 0 {
					<-first
					if through == nil || (firstErr == nil && firstPg.last != nil && *firstPg.last == *through) {
						j.pg, j.err = firstPg, firstErr
						return
					}
				}
				j.pg, j.err = e.pages.get(key, func() (page, error) {
					if through == nil {
						return e.buildPage(ctx, base.partition, l, eff, pageAfter, base.limit)
					}
					return e.buildRangePage(ctx, base.partition, l, eff, pageAfter, *through, base.limit)
				})
			}(i, from)
			if through == nil {
				i++
				return // the walk's last page: the plan holds no more
			}
			from = through
		}
	}()
	return p
}

// chainPages plans the pages after `after`, at most pages of them, as a
// chain (store.PageChainer): each page is read from the end of the one
// before as soon as that one is built, ahead of the response (at most
// planParallel pages built and not taken), so the store reads the pages
// one after another while the response writes and publishes the ones
// before. They are the pages the page-by-page loop builds (the same
// keys, shared with other clients through the page cache), never cut.
func (e *Engine) chainPages(ctx context.Context, base pageKey, l pageLayout, eff wire.ScopeMap, after *string, pages int) *pagePlan {
	p, ctx := newPagePlan(ctx, pages)
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		i := 0
		defer func() { p.endFrom(i) }()
		for ; i < len(p.jobs); i++ {
			j := p.jobs[i]
			if !p.acquire(ctx, j) {
				i++
				return
			}
			key, from := base, after
			if from != nil {
				key.after, key.hasAfter = *from, true
			}
			j.pg, j.err = e.pages.get(key, func() (page, error) {
				return e.buildPage(ctx, base.partition, l, eff, from, base.limit)
			})
			close(j.done)
			if j.err != nil || j.pg.last == nil {
				i++
				return // a failed or last page: the chain holds no more
			}
			after = j.pg.last
		}
	}()
	return p
}

// newPagePlan returns a plan of at most pages pages and the context its
// builds run under, which stop cancels.
func newPagePlan(ctx context.Context, pages int) (*pagePlan, context.Context) {
	ctx, cancel := context.WithCancel(ctx)
	p := &pagePlan{cancel: cancel, sem: make(chan struct{}, planParallel()), jobs: make([]*planJob, pages)}
	for i := range p.jobs {
		p.jobs[i] = &planJob{done: make(chan struct{})}
	}
	return p, ctx
}

// acquire takes a slot of the plan for j (the plan's scheduler, in page
// order), or ends j with ctx's error when the plan is stopped first.
func (p *pagePlan) acquire(ctx context.Context, j *planJob) bool {
	select {
	case p.sem <- struct{}{}:
		j.slot = true
		return true
	case <-ctx.Done():
		j.err = ctx.Err()
		close(j.done)
		return false
	}
}

// endFrom ends the jobs from i on absent: the plan holds no more pages.
func (p *pagePlan) endFrom(i int) {
	for ; i < len(p.jobs); i++ {
		p.jobs[i].absent = true
		close(p.jobs[i].done)
	}
}

// take waits for the plan's next page; ok is false when the plan holds no
// more (a nil plan holds none).
func (p *pagePlan) take() (pg page, ok bool, err error) {
	if p == nil || p.next >= len(p.jobs) {
		return page{}, false, nil
	}
	j := p.jobs[p.next]
	<-j.done
	if j.absent {
		return page{}, false, nil
	}
	p.next++
	if j.slot {
		<-p.sem // the page leaves the plan: the next one may start
	}
	return j.pg, true, j.err
}

// ready is closed when take would not wait; nil when the plan holds no
// more pages (a nil plan holds none).
func (p *pagePlan) ready() <-chan struct{} {
	if p == nil || p.next >= len(p.jobs) {
		return nil
	}
	return p.jobs[p.next].done
}

// stop cancels the builds not taken and waits for them; a nil plan has
// none.
func (p *pagePlan) stop() {
	if p == nil {
		return
	}
	p.cancel()
	p.wg.Wait()
}
