package engine

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"sync"
	"sync/atomic"
	"time"

	"github.com/syncgo/syncgo/internal/sqliteimage"
	"github.com/syncgo/syncgo/schema"
	"github.com/syncgo/syncgo/store"
	"github.com/syncgo/syncgo/wire"
)

// The sqlite-image lane (§5.3): a bootstrap that starts a table, from a
// client that accepts sqlite segments (accept bit 2), of a table without
// encrypted columns, pins at its scope pin (§4.7); when the snapshot
// exceeds one rows page it is served as one whole-table SQLite image by
// SEGMENT_REF. One stored image serves every client with the same reuse
// key while its publication is unexpired; concurrent cold requests for a
// key share one build, which runs detached from the requests.

const (
	// imageScanBatch is the keyset batch of the scans that feed a build,
	// and the most rows of the probe handed to the builder at once. Three
	// batches' memory serve a whole build; smaller batches touch less
	// fresh memory (cold 100,000-row image from a fresh process: 5,000
	// rows 187-199 ms, 2,000 rows 181-193, 1,000 rows 180-204).
	imageScanBatch = 2000
	// imageBuildTimeout bounds a detached build.
	imageBuildTimeout = 10 * time.Minute
	// imageBuildSlots bounds the builds that run at once, and so the image
	// bytes held in memory before they reach the segment store.
	imageBuildSlots = 2
	// imageIndexMax bounds the reuse index.
	imageIndexMax = 4096
)

// imageKey is the reuse key of an image (§5.3): one stored image per key.
type imageKey struct {
	partition, epoch, table, digest string
	schemaVersion                   int32
	asOf                            int64
}

// imageRef is a built image as the index remembers it.
type imageRef struct {
	id         string
	byteLength int64
	rowCount   int64
	// expiresAtMs is the expiry of the image's publication for the key.
	expiresAtMs int64
	// rowsLane marks a key whose image cannot be served (over the size
	// limit, or a value SQLite cannot store): the rows lane serves it.
	rowsLane bool
}

// imageEntry is an index entry: a build in flight until done is closed,
// then its outcome.
type imageEntry struct {
	done chan struct{}
	ref  imageRef
	err  error
}

func (e *imageEntry) finished() bool { return closed(e.done) }

// imageIndex maps reuse keys to the images in the segment store and
// coalesces concurrent builds of a key. The zero value is ready to use.
type imageIndex struct {
	mu      sync.Mutex
	entries map[imageKey]*imageEntry
	slots   chan struct{}

	built, reused, rowsLane atomic.Int64
}

// SQLiteImageStats counts the outcomes of the sqlite lane.
type SQLiteImageStats struct {
	// Built counts images built and published.
	Built int64
	// Reused counts bootstraps served an image already stored.
	Reused int64
	// RowsLane counts builds that ended on the rows lane (an image over
	// Limits.SQLiteImageMaxBytes, or a value SQLite cannot store).
	RowsLane int64
}

// SQLiteImageStats returns the sqlite lane's counters.
func (e *Engine) SQLiteImageStats() SQLiteImageStats {
	x := &e.images
	return SQLiteImageStats{Built: x.built.Load(), Reused: x.reused.Load(), RowsLane: x.rowsLane.Load()}
}

// lookup returns the finished, unexpired entry of key.
func (x *imageIndex) lookup(key imageKey, nowMs int64) (imageRef, bool) {
	x.mu.Lock()
	defer x.mu.Unlock()
	e, ok := x.entries[key]
	if !ok || !e.finished() {
		return imageRef{}, false
	}
	if e.err != nil || nowMs >= e.ref.expiresAtMs {
		delete(x.entries, key)
		return imageRef{}, false
	}
	return e.ref, true
}

// remember records a stored image found for key, unless an entry (a
// build in flight, or a finished one) is there already.
func (x *imageIndex) remember(key imageKey, ref imageRef) {
	x.mu.Lock()
	defer x.mu.Unlock()
	if x.entries == nil {
		x.entries = map[imageKey]*imageEntry{}
		x.slots = make(chan struct{}, imageBuildSlots)
	}
	if _, ok := x.entries[key]; ok {
		return
	}
	x.prune(0)
	e := &imageEntry{done: make(chan struct{}), ref: ref}
	close(e.done)
	x.entries[key] = e
}

// storeKey is the segment store's form of the key.
func (k imageKey) storeKey() store.SegmentKey {
	return store.SegmentKey{Partition: k.partition, LogEpoch: k.epoch, Table: k.table, SchemaVersion: k.schemaVersion,
		MediaType: wire.MediaSQLite, ScopeDigest: k.digest, AsOfCommitSeq: k.asOf}
}

// extend records a refreshed publication's expiry.
func (x *imageIndex) extend(key imageKey, id string, expiresAtMs int64) {
	x.mu.Lock()
	defer x.mu.Unlock()
	if e, ok := x.entries[key]; ok && e.finished() && e.err == nil && e.ref.id == id {
		e.ref.expiresAtMs = max(e.ref.expiresAtMs, expiresAtMs)
	}
}

// forget drops the entry of key if it still names the image id.
func (x *imageIndex) forget(key imageKey, id string) {
	x.mu.Lock()
	defer x.mu.Unlock()
	if e, ok := x.entries[key]; ok && e.finished() && e.ref.id == id {
		delete(x.entries, key)
	}
}

// get returns the image of key, joining the build in flight or starting
// one. The build runs on a context detached from ctx, so a requester that
// gives up (ctx done) cancels neither the build nor the others waiting on
// it.
func (x *imageIndex) get(ctx context.Context, key imageKey, nowMs int64, build func(context.Context) (imageRef, error)) (imageRef, error) {
	x.mu.Lock()
	if x.entries == nil {
		x.entries = map[imageKey]*imageEntry{}
		x.slots = make(chan struct{}, imageBuildSlots)
	}
	e, ok := x.entries[key]
	if ok && e.finished() && (e.err != nil || nowMs >= e.ref.expiresAtMs) {
		delete(x.entries, key)
		ok = false
	}
	if !ok {
		e = &imageEntry{done: make(chan struct{})}
		x.prune(nowMs)
		x.entries[key] = e
		go x.run(context.WithoutCancel(ctx), key, e, build)
	}
	x.mu.Unlock()
	select {
	case <-e.done:
		return e.ref, e.err
	case <-ctx.Done():
		return imageRef{}, ctx.Err()
	}
}

// run builds the image of an entry and records the outcome; a failed build
// leaves no entry, so the next request tries again.
func (x *imageIndex) run(ctx context.Context, key imageKey, e *imageEntry, build func(context.Context) (imageRef, error)) {
	ctx, cancel := context.WithTimeout(ctx, imageBuildTimeout)
	defer cancel()
	var (
		ref imageRef
		err error
	)
	select {
	case x.slots <- struct{}{}:
		ref, err = build(ctx)
		<-x.slots
	case <-ctx.Done():
		err = ctx.Err()
	}
	x.mu.Lock()
	e.ref, e.err = ref, err
	if err != nil && x.entries[key] == e {
		delete(x.entries, key)
	}
	x.mu.Unlock()
	close(e.done)
}

// prune keeps the index under imageIndexMax entries: expired and failed
// ones go first, then any finished one. Forgetting a live image costs a
// rebuild, never a wrong answer. It requires x.mu.
func (x *imageIndex) prune(nowMs int64) {
	if len(x.entries) < imageIndexMax {
		return
	}
	for k, e := range x.entries {
		if e.finished() && (e.err != nil || nowMs >= e.ref.expiresAtMs) {
			delete(x.entries, k)
		}
	}
	for k, e := range x.entries {
		if len(x.entries) < imageIndexMax {
			return
		}
		if e.finished() {
			delete(x.entries, k)
		}
	}
}

// sqliteEligible reports whether a bootstrap of t resuming at after may
// take the sqlite lane (§5.3): the client accepts sqlite segments, the
// bootstrap is at the start of the table, the table has no encrypted
// column (an image would copy ciphertext past the client's per-row
// decryption, §5.11), and the host has not disabled the lane.
func (r *request) sqliteEligible(t *schema.CompiledTable, after *string) bool {
	return !r.old() && r.req.Pull.Accept&wire.AcceptSQLite != 0 && after == nil &&
		len(t.EncryptedColumns()) == 0 && r.e.cfg.Limits.SQLiteImageMaxBytes >= 0
}

// scopePin returns the §4.7 scope pin of a sqlite-lane bootstrap: the
// newest commit whose change to the table carries a value of the first
// scope variable (eff is in canonical key order and never empty for an
// active subscription), raised to the horizon and capped at maxCommitSeq.
func (r *request) scopePin(ctx context.Context, table string, eff wire.ScopeMap, p store.Partition) (int64, error) {
	latest, err := r.e.cfg.Store.LatestScopedChangeSeq(ctx, r.auth.Partition, table, eff[0])
	if err != nil {
		return 0, fmt.Errorf("scope pin: %w", err)
	}
	return min(p.MaxCommitSeq, max(latest, p.HorizonSeq)), nil
}

// sqliteLane serves the table as one image at asOf when an unexpired one is
// stored for the key, or when the snapshot exceeds one rows page (§5.3).
// Otherwise it reports false, with the eligibility probe (the rows lane's
// first page, scanned with one look-ahead row), or a nil probe when it read
// none.
func (r *request) sqliteLane(ctx context.Context, t *schema.CompiledTable, eff wire.ScopeMap, lim pullLimits, asOf int64, digest, epoch string) (served bool, probe *[]store.Row, err error) {
	e := r.e
	key := imageKey{partition: r.auth.Partition, epoch: epoch, table: t.Name(), digest: digest,
		schemaVersion: e.cfg.Schema.Version(), asOf: asOf}
	if ref, ok := e.images.lookup(key, e.cfg.Now()); ok {
		if ref.rowsLane {
			return false, nil, nil
		}
		served, err := r.reuseImage(ctx, key, ref)
		if served || err != nil {
			return served, nil, err
		}
	}
	// Another process of the fleet (or this one before a restart) may
	// have published an image for the key: serving it is the §5.3 reuse
	// MUST, across processes.
	rec, err := e.cfg.Segments.FindSegment(ctx, key.storeKey(), e.cfg.Now())
	switch {
	case err == nil:
		ref := imageRef{id: rec.ID, byteLength: rec.ByteLength, rowCount: rec.Publication.RowCount, expiresAtMs: rec.Publication.ExpiresAtMs}
		e.images.remember(key, ref)
		served, err := r.reuseImage(ctx, key, ref)
		if served || err != nil {
			return served, nil, err
		}
	case !errors.Is(err, store.ErrNotFound):
		return false, nil, fmt.Errorf("find sqlite image: %w", err)
	}
	first, err := e.cfg.Store.ScanRows(ctx, r.auth.Partition, store.RowScanQuery{Table: t.Name(), Scopes: eff, Limit: lim.rows + 1, NoScopes: true})
	if err != nil {
		return false, nil, err
	}
	if len(first) <= lim.rows {
		return false, &first, nil
	}
	ref, err := e.images.get(ctx, key, e.cfg.Now(), func(ctx context.Context) (imageRef, error) {
		return e.buildImage(ctx, key, t, eff, first)
	})
	if err != nil {
		return false, nil, err
	}
	if ref.rowsLane {
		return false, &first, nil
	}
	return true, nil, r.writeImageRef(key, ref)
}

// reuseImage serves a stored image, refreshing its publication so the
// client has the full TTL to download it. It reports false when the
// segment store no longer holds the image (a byte-bounded store forgets
// the oldest segments first).
func (r *request) reuseImage(ctx context.Context, key imageKey, ref imageRef) (bool, error) {
	e := r.e
	pub := e.imagePublication(key, ref.rowCount)
	err := e.publish(ctx, ref.id, nil, pub)
	if errors.Is(err, store.ErrNotFound) {
		e.images.forget(key, ref.id)
		return false, nil
	}
	if err != nil {
		return false, err
	}
	e.images.extend(key, ref.id, pub.ExpiresAtMs)
	e.images.reused.Add(1)
	return true, r.writeImageRef(key, ref)
}

// writeImageRef writes the SEGMENT_REF of an image: no row cursors (the image
// is the first and the last page of its table), never inline (§5.3, §5.7).
func (r *request) writeImageRef(key imageKey, ref imageRef) error {
	sr := &wire.SegmentRef{SegmentID: ref.id, MediaType: wire.MediaSQLite, Table: key.table,
		ByteLength: ref.byteLength, RowCount: ref.rowCount, AsOfCommitSeq: key.asOf, ScopeDigest: key.digest}
	if err := r.signRef(sr); err != nil {
		return err
	}
	return r.enc.Encode(sr)
}

// imageBatch is a batch of an image build's rows: the stored payloads
// copied into one buffer, and the rows decoded from it into one slab of
// values. Its memory is reused from batch to batch.
type imageBatch struct {
	buf      []byte
	ends     []int // the end of each payload in buf
	versions []int64
	lastID   []byte
	last     string // the row id of the last row, once decoded
	vals     []wire.Value
	rows     []sqliteimage.Row
	err      error
}

// take copies a visited row (store.RowVisitor: its bytes are the store's
// until the call returns).
func (b *imageBatch) take(r *store.Row) bool {
	b.buf = append(b.buf, r.Payload...)
	b.ends = append(b.ends, len(b.buf))
	b.versions = append(b.versions, r.ServerVersion)
	b.lastID = append(b.lastID[:0], r.RowID...)
	return true
}

// fill takes rows into an empty batch.
func (b *imageBatch) fill(rows []store.Row) {
	for i := range rows {
		b.take(&rows[i])
	}
}

func (b *imageBatch) reset() {
	b.buf, b.ends, b.versions, b.lastID = b.buf[:0], b.ends[:0], b.versions[:0], b.lastID[:0]
	b.rows, b.err = b.rows[:0], nil
}

func (b *imageBatch) count() int { return len(b.ends) }

// decode decodes the taken payloads into b.rows, the stored framing
// checked, not the contents (the codec checked them when they were
// written; a row of another layout is still refused).
func (b *imageBatch) decode(t *schema.CompiledTable) error {
	codec := t.RowCodec()
	n := len(t.Columns())
	if need := len(b.ends) * n; cap(b.vals) < need {
		b.vals = make([]wire.Value, need)
	} else {
		b.vals = b.vals[:need]
	}
	b.rows = b.rows[:0]
	b.last = string(b.lastID)
	start := 0
	for i, end := range b.ends {
		vals := b.vals[i*n : (i+1)*n : (i+1)*n]
		if err := codec.DecodeStoredRow(vals, b.buf[start:end]); err != nil {
			return fmt.Errorf("row %d of the batch ending at %s: %w", i+1, b.last, err)
		}
		b.rows = append(b.rows, sqliteimage.Row{ServerVersion: b.versions[i], Values: vals})
		start = end
	}
	return nil
}

// visitRows visits the rows of q (store.RowVisitor, or ScanRows' rows).
func (e *Engine) visitRows(ctx context.Context, partition string, q store.RowScanQuery, visit func(r *store.Row) bool) error {
	if v, ok := e.cfg.Store.(store.RowVisitor); ok {
		return v.VisitRows(ctx, partition, q, visit)
	}
	rows, err := e.cfg.Store.ScanRows(ctx, partition, q)
	if err != nil {
		return err
	}
	store.VisitEach(rows, visit)
	return nil
}

// imagePublication is the publication of an image under its key, from now.
func (e *Engine) imagePublication(key imageKey, rowCount int64) Publication {
	now := e.cfg.Now()
	return Publication{Partition: key.partition, LogEpoch: key.epoch, Table: key.table,
		SchemaVersion: key.schemaVersion, MediaType: wire.MediaSQLite, ScopeDigest: key.digest,
		AsOfCommitSeq: key.asOf, RowCount: rowCount, CreatedAtMs: now, ExpiresAtMs: now + e.cfg.Limits.SegmentTTL.Milliseconds()}
}

// buildImage builds the image of key from the probe and keyset scans of
// the rest of the table, and publishes it. An image the lane cannot serve
// is remembered as rowsLane for the publication lifetime.
func (e *Engine) buildImage(ctx context.Context, key imageKey, t *schema.CompiledTable, eff wire.ScopeMap, probe []store.Row) (imageRef, error) {
	start := time.Now()
	var rowCount int64
	// The batches are scanned and decoded one ahead of the builder, on
	// their own goroutine: the store read of a batch overlaps the image
	// inserts of the one before (two cores do both at once). A batch the
	// builder is done with (its yield returned: the inserts copied the
	// values) goes back to the scanner, which fills it again: three
	// batches' memory serve the whole build instead of fresh memory for
	// every batch (a cold process faults every new page in).
	rows := func(yield func([]sqliteimage.Row, error) bool) {
		ch := make(chan *imageBatch, 1)
		free := make(chan *imageBatch, 3)
		stop := make(chan struct{})
		go func() {
			defer close(ch)
			send := func(b *imageBatch) bool {
				select {
				case ch <- b:
					return true
				case <-stop:
					return false
				}
			}
			next := func() *imageBatch {
				select {
				case b := <-free:
					b.reset()
					return b
				default:
					return &imageBatch{}
				}
			}
			// The probe first, in batches of at most imageScanBatch rows.
			// It is a full page with a look-ahead row: more may follow.
			var last string
			for rest := probe; len(rest) > 0; {
				k := min(len(rest), imageScanBatch)
				b := next()
				b.fill(rest[:k])
				rest = rest[k:]
				b.err = b.decode(t)
				last = b.last
				if !send(b) || b.err != nil {
					return
				}
			}
			for len(probe) > 0 {
				b := next()
				b.err = e.visitRows(ctx, key.partition, store.RowScanQuery{Table: key.table, Scopes: eff, After: &last, Limit: imageScanBatch, NoScopes: true}, b.take)
				if b.err == nil {
					b.err = b.decode(t)
				}
				full := b.count() == imageScanBatch
				last = b.last
				if !send(b) || b.err != nil || !full {
					return
				}
			}
		}()
		defer func() {
			close(stop)
			for range ch { // wait for the scanner to end
			}
		}()
		for b := range ch {
			if b.err != nil {
				yield(nil, b.err)
				return
			}
			rowCount += int64(len(b.rows))
			if !yield(b.rows, nil) {
				return
			}
			select {
			case free <- b:
			default:
			}
		}
	}
	meta := sqliteimage.Meta{Table: key.table, SchemaVersion: key.schemaVersion, AsOfCommitSeq: key.asOf, ScopeDigest: key.digest}
	b := sqliteimage.Builder{Dir: e.cfg.ImageDir, MaxBytes: e.cfg.Limits.SQLiteImageMaxBytes}
	img, err := b.BuildFile(ctx, meta, t.WireColumns(), t.PrimaryKey(), rows)
	if errors.Is(err, sqliteimage.ErrTooLarge) || errors.Is(err, sqliteimage.ErrUnrepresentable) {
		e.images.rowsLane.Add(1)
		e.cfg.Logger.InfoContext(ctx, "sqlite image not served; the rows lane serves the table",
			"partition", key.partition, "table", key.table, "asOfCommitSeq", key.asOf, "reason", err)
		return imageRef{rowsLane: true, expiresAtMs: e.cfg.Now() + e.cfg.Limits.SegmentTTL.Milliseconds()}, nil
	}
	if err != nil {
		return imageRef{}, fmt.Errorf("build sqlite image of %s: %w", key.table, err)
	}
	defer img.Close()
	// The image is hashed and published from its file: a store that keeps
	// bodies gets the compressed body, and the image's bytes are never
	// all in memory.
	h := sha256.New()
	if _, err := io.Copy(h, io.NewSectionReader(img, 0, img.Size())); err != nil {
		return imageRef{}, fmt.Errorf("read sqlite image: %w", err)
	}
	id := "sha256:" + hex.EncodeToString(h.Sum(nil))
	pub := e.imagePublication(key, rowCount)
	if err := e.publishFrom(ctx, id, &segmentSource{r: img, size: img.Size()}, pub); err != nil {
		return imageRef{}, fmt.Errorf("publish sqlite image: %w", err)
	}
	e.images.built.Add(1)
	e.cfg.Logger.InfoContext(ctx, "sqlite image built", "partition", key.partition, "table", key.table,
		"asOfCommitSeq", key.asOf, "segmentId", id, "rows", rowCount, "bytes", img.Size(), "duration", time.Since(start))
	return imageRef{id: id, byteLength: img.Size(), rowCount: rowCount, expiresAtMs: pub.ExpiresAtMs}, nil
}
