package storetest

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"sync"
	"testing"

	"github.com/klauspost/compress/zstd"

	"github.com/syncgo/syncgo/store"
	"github.com/syncgo/syncgo/wire"
)

// SegmentOpener returns a segment store on a fresh, empty database, and a
// function that opens another segment store on the same database (as
// another server process would), or nil when the store cannot be shared.
type SegmentOpener func(tb testing.TB) (s store.SegmentStore, share func(tb testing.TB) store.SegmentStore)

// RunSegments runs the segment-store tests against the store.SegmentStorer
// of the driver's stores; another process is a store from Reopener when the
// test store implements it. A driver without a segment store skips.
func RunSegments(t *testing.T, open Opener) {
	RunSegmentStore(t, func(tb testing.TB) (store.SegmentStore, func(testing.TB) store.SegmentStore) {
		s := open(tb)
		ss, ok := s.(store.SegmentStorer)
		if !ok {
			tb.Skip("the driver has no segment store")
		}
		r, ok := s.(Reopener)
		if !ok {
			return ss.SegmentStore(), nil
		}
		return ss.SegmentStore(), func(tb testing.TB) store.SegmentStore {
			o, ok := r.Reopen(tb).(store.SegmentStorer)
			if !ok {
				tb.Fatal("the reopened store has no segment store")
			}
			return o.SegmentStore()
		}
	})
}

// RunSegmentStore runs the tests of the store.SegmentStore contract.
func RunSegmentStore(t *testing.T, open SegmentOpener) {
	cases := []struct {
		name string
		run  func(t *testing.T, open SegmentOpener)
	}{
		{"RoundTrip", segRoundTrip},
		{"Unknown", segUnknown},
		{"SameContextExtends", segSameContext},
		{"ContextsKeepOwnExpiry", segContexts},
		{"NilBytes", segNilBytes},
		{"Collision", segCollision},
		{"Find", segFind},
		{"Sweep", segSweep},
		{"SharedAcrossProcesses", segShared},
		{"ConcurrentPublishers", segConcurrent},
		{"Large", segLarge},
		{"BodyRoundTrip", segBodyRoundTrip},
		{"BodyAndBytes", segBodyAndBytes},
		{"BodyFindSweep", segBodyFindSweep},
		{"BodyShared", segBodyShared},
		{"BodyConcurrentPublishers", segBodyConcurrent},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			c.run(t, open)
		})
	}
}

// segBytes returns deterministic segment-like bytes and their address.
func segBytes(seed string, n int) ([]byte, string) {
	b := make([]byte, n)
	h := sha256.Sum256([]byte(seed))
	for i := range b {
		if i%32 == 0 && i > 0 {
			h = sha256.Sum256(h[:])
		}
		b[i] = h[i%32]
	}
	sum := sha256.Sum256(b)
	return b, "sha256:" + hex.EncodeToString(sum[:])
}

func strp(s string) *string { return &s }

// segPub is a rows publication in partition p of a page after cursor.
func segPub(p string, after *string, created, expires int64) store.SegmentPublication {
	return store.SegmentPublication{Partition: p, LogEpoch: "epoch-1", Table: "tasks", SchemaVersion: 3,
		MediaType: wire.MediaRows, ScopeDigest: "digest-a", AsOfCommitSeq: 42, RowCursor: after,
		NextRowCursor: strp("row-9"), RowCount: 10, CreatedAtMs: created, ExpiresAtMs: expires}
}

func mustPublish(tb testing.TB, s store.SegmentStore, id string, b []byte, p store.SegmentPublication) {
	tb.Helper()
	if err := s.PublishSegment(context.Background(), id, b, p); err != nil {
		tb.Fatalf("PublishSegment(%s): %v", id, err)
	}
}

func mustSegment(tb testing.TB, s store.SegmentStore, id string) store.Segment {
	tb.Helper()
	seg, err := s.Segment(context.Background(), id)
	if err != nil {
		tb.Fatalf("Segment(%s): %v", id, err)
	}
	return seg
}

// pubString renders a publication for comparisons and messages.
func pubString(p store.SegmentPublication) string {
	opt := func(s *string) string {
		if s == nil {
			return "<nil>"
		}
		return fmt.Sprintf("%q", *s)
	}
	return fmt.Sprintf("{%s %s %s v%d m%d %s @%d %s→%s n=%d %d..%d}", p.Partition, p.LogEpoch, p.Table, p.SchemaVersion,
		p.MediaType, p.ScopeDigest, p.AsOfCommitSeq, opt(p.RowCursor), opt(p.NextRowCursor), p.RowCount, p.CreatedAtMs, p.ExpiresAtMs)
}

func samePubs(tb testing.TB, what string, got []store.SegmentPublication, want ...store.SegmentPublication) {
	tb.Helper()
	g := map[string]int{}
	for _, p := range got {
		g[pubString(p)]++
	}
	w := map[string]int{}
	for _, p := range want {
		w[pubString(p)]++
	}
	if len(got) != len(want) || fmt.Sprint(g) != fmt.Sprint(w) {
		var gs, ws []string
		for _, p := range got {
			gs = append(gs, pubString(p))
		}
		for _, p := range want {
			ws = append(ws, pubString(p))
		}
		tb.Fatalf("%s: publications\n got %v\nwant %v", what, gs, ws)
	}
}

func segRoundTrip(t *testing.T, open SegmentOpener) {
	s, _ := open(t)
	rows, rowsID := segBytes("rows", 1000)
	p := segPub("part-1", nil, 1000, 5000)
	mustPublish(t, s, rowsID, rows, p)
	seg := mustSegment(t, s, rowsID)
	if seg.ID != rowsID || !bytes.Equal(seg.Bytes, rows) {
		t.Fatalf("Segment returned %d bytes under %s; want the %d published", len(seg.Bytes), seg.ID, len(rows))
	}
	samePubs(t, "rows page", seg.Publications, p)

	img, imgID := segBytes("image", 3000)
	q := segPub("part-1", nil, 1000, 5000)
	q.MediaType, q.NextRowCursor, q.RowCount = wire.MediaSQLite, nil, 77
	mustPublish(t, s, imgID, img, q)
	samePubs(t, "image", mustSegment(t, s, imgID).Publications, q)

	// A page with both cursors, and one with an empty-string cursor.
	mid, midID := segBytes("mid", 10)
	r := segPub("part-1", strp("row-0"), 1, 2)
	mustPublish(t, s, midID, mid, r)
	e := segPub("part-1", strp(""), 1, 2)
	mustPublish(t, s, midID, nil, e)
	samePubs(t, "cursors", mustSegment(t, s, midID).Publications, r, e)

	st, err := s.SegmentStats(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if st.Segments != 3 || st.Publications != 4 || st.Bytes != 4010 {
		t.Fatalf("SegmentStats = %+v; want 3 segments, 4 publications, 4010 bytes", st)
	}
}

func segUnknown(t *testing.T, open SegmentOpener) {
	s, _ := open(t)
	_, id := segBytes("never", 5)
	if _, err := s.Segment(context.Background(), id); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("Segment of an unknown id: %v; want ErrNotFound", err)
	}
}

func segSameContext(t *testing.T, open SegmentOpener) {
	s, _ := open(t)
	b, id := segBytes("same", 100)
	p := segPub("part-1", nil, 1000, 5000)
	mustPublish(t, s, id, b, p)
	later := p
	later.CreatedAtMs, later.ExpiresAtMs = 2000, 9000
	mustPublish(t, s, id, b, later)
	want := p
	want.ExpiresAtMs = 9000
	samePubs(t, "after a refresh", mustSegment(t, s, id).Publications, want)
	// An older publication of the same context never shortens it.
	older := p
	older.ExpiresAtMs = 3000
	mustPublish(t, s, id, b, older)
	samePubs(t, "after an older publication", mustSegment(t, s, id).Publications, want)
}

func segContexts(t *testing.T, open SegmentOpener) {
	s, _ := open(t)
	b, id := segBytes("ctx", 100)
	a := segPub("part-1", nil, 1000, 5000)
	other := segPub("part-2", nil, 1000, 5000)
	digest := segPub("part-1", nil, 1000, 5000)
	digest.ScopeDigest = "digest-b"
	epoch := segPub("part-1", nil, 1000, 5000)
	epoch.LogEpoch = "epoch-2"
	for _, p := range []store.SegmentPublication{a, other, digest, epoch} {
		mustPublish(t, s, id, b, p)
	}
	refreshed := digest
	refreshed.ExpiresAtMs = 99999
	mustPublish(t, s, id, b, refreshed)
	samePubs(t, "four contexts, one refreshed", mustSegment(t, s, id).Publications, a, other, refreshed, epoch)
}

func segNilBytes(t *testing.T, open SegmentOpener) {
	s, _ := open(t)
	_, id := segBytes("nil", 100)
	if err := s.PublishSegment(context.Background(), id, nil, segPub("part-1", nil, 1, 2)); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("PublishSegment without bytes of an unknown segment: %v; want ErrNotFound", err)
	}
	if _, err := s.Segment(context.Background(), id); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("after a refused publication: %v; want nothing stored", err)
	}
}

func segCollision(t *testing.T, open SegmentOpener) {
	s, _ := open(t)
	b, id := segBytes("collide", 100)
	p := segPub("part-1", nil, 1000, 5000)
	mustPublish(t, s, id, b, p)
	q := segPub("part-2", nil, 1000, 9000)
	if err := s.PublishSegment(context.Background(), id, make([]byte, 99), q); err == nil {
		t.Fatal("bytes of another length under a stored id were accepted; want a loud failure")
	}
	seg := mustSegment(t, s, id)
	if !bytes.Equal(seg.Bytes, b) {
		t.Fatal("a colliding publication overwrote the stored bytes")
	}
	samePubs(t, "after a collision", seg.Publications, p)
}

func segFind(t *testing.T, open SegmentOpener) {
	s, _ := open(t)
	ctx := context.Background()
	img := func(seed string, expires int64) (string, store.SegmentPublication) {
		b, id := segBytes(seed, 200)
		p := segPub("part-1", nil, 1000, expires)
		p.MediaType, p.NextRowCursor = wire.MediaSQLite, nil
		mustPublish(t, s, id, b, p)
		return id, p
	}
	key := store.KeyOf(segPub("part-1", nil, 0, 0))
	key.MediaType = wire.MediaSQLite
	if _, err := s.FindSegment(ctx, key, 0); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("FindSegment in an empty store: %v; want ErrNotFound", err)
	}
	_, _ = img("short", 3000)
	longID, long := img("long", 8000)
	// A rows page under the same key fields, and images under other keys.
	b, id := segBytes("page", 50)
	page := segPub("part-1", strp("r"), 1000, 20000)
	page.MediaType = wire.MediaSQLite
	mustPublish(t, s, id, b, page)
	for i, mut := range []func(*store.SegmentPublication){
		func(p *store.SegmentPublication) { p.Partition = "part-2" },
		func(p *store.SegmentPublication) { p.LogEpoch = "epoch-9" },
		func(p *store.SegmentPublication) { p.SchemaVersion = 4 },
		func(p *store.SegmentPublication) { p.ScopeDigest = "digest-z" },
		func(p *store.SegmentPublication) { p.AsOfCommitSeq = 43 },
		func(p *store.SegmentPublication) { p.Table = "notes" },
		func(p *store.SegmentPublication) { p.MediaType = wire.MediaRows },
	} {
		b, id := segBytes(fmt.Sprint("other-", i), 60)
		p := segPub("part-1", nil, 1000, 50000)
		p.MediaType, p.NextRowCursor = wire.MediaSQLite, nil
		mut(&p)
		mustPublish(t, s, id, b, p)
	}
	rec, err := s.FindSegment(ctx, key, 2000)
	if err != nil {
		t.Fatalf("FindSegment: %v", err)
	}
	if rec.ID != longID || rec.ByteLength != 200 || pubString(rec.Publication) != pubString(long) {
		t.Fatalf("FindSegment = %s (%d bytes) %s; want the image expiring last, %s %s", rec.ID, rec.ByteLength,
			pubString(rec.Publication), longID, pubString(long))
	}
	if rec, err := s.FindSegment(ctx, key, 8000); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("FindSegment at the last expiry = %s, %v; want ErrNotFound", rec.ID, err)
	}
}

func segSweep(t *testing.T, open SegmentOpener) {
	s, _ := open(t)
	ctx := context.Background()
	b1, id1 := segBytes("one", 100)
	b2, id2 := segBytes("two", 300)
	early := segPub("part-1", nil, 0, 1000)
	late := segPub("part-2", nil, 0, 5000)
	mustPublish(t, s, id1, b1, early)
	mustPublish(t, s, id1, b1, late)
	mustPublish(t, s, id2, b2, early)

	sw, err := s.SweepSegments(ctx, 1000)
	if err != nil || sw != (store.SegmentSweep{}) {
		t.Fatalf("SweepSegments before anything expired = %+v, %v; want nothing", sw, err)
	}
	sw, err = s.SweepSegments(ctx, 2000)
	if err != nil {
		t.Fatal(err)
	}
	if sw.Publications != 2 || sw.Segments != 1 || sw.Bytes != 300 {
		t.Fatalf("SweepSegments(2000) = %+v; want 2 publications and the 300-byte segment", sw)
	}
	if _, err := s.Segment(ctx, id2); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("a swept segment: %v; want ErrNotFound", err)
	}
	samePubs(t, "the segment with a live publication", mustSegment(t, s, id1).Publications, late)
	sw, err = s.SweepSegments(ctx, 6000)
	if err != nil || sw.Publications != 1 || sw.Segments != 1 || sw.Bytes != 100 {
		t.Fatalf("SweepSegments(6000) = %+v, %v; want the last segment", sw, err)
	}
	st, err := s.SegmentStats(ctx)
	if err != nil || st != (store.SegmentStats{}) {
		t.Fatalf("SegmentStats after sweeping everything = %+v, %v; want zero", st, err)
	}
	// A sweep of many segments finishes (drivers delete in batches).
	for i := range 1200 {
		b, id := segBytes(fmt.Sprint("many-", i), 8)
		mustPublish(t, s, id, b, segPub("part-1", nil, 0, 10))
	}
	sw, err = s.SweepSegments(ctx, 11)
	if err != nil || sw.Segments != 1200 || sw.Publications != 1200 {
		t.Fatalf("SweepSegments of 1200 = %+v, %v", sw, err)
	}
}

func segShared(t *testing.T, open SegmentOpener) {
	a, share := open(t)
	if share == nil {
		t.Skip("the store is not shared between processes")
	}
	b := share(t)
	ctx := context.Background()
	bs, id := segBytes("shared", 500)
	p := segPub("part-1", nil, 1000, 5000)
	mustPublish(t, a, id, bs, p)
	seg := mustSegment(t, b, id)
	if !bytes.Equal(seg.Bytes, bs) {
		t.Fatal("the other process read other bytes")
	}
	samePubs(t, "read by the other process", seg.Publications, p)
	q := segPub("part-1", nil, 1000, 7000)
	q.ScopeDigest = "digest-b"
	mustPublish(t, b, id, nil, q)
	samePubs(t, "published by both", mustSegment(t, a, id).Publications, p, q)
	if _, err := b.SweepSegments(ctx, 6000); err != nil {
		t.Fatal(err)
	}
	samePubs(t, "swept by the other process", mustSegment(t, a, id).Publications, q)
}

func segConcurrent(t *testing.T, open SegmentOpener) {
	a, share := open(t)
	stores := []store.SegmentStore{a}
	if share != nil {
		stores = append(stores, share(t))
	}
	bs, id := segBytes("race", 2000)
	want := publishAtOnce(t, "PublishSegment", func(i int, p store.SegmentPublication) error {
		return stores[i%len(stores)].PublishSegment(context.Background(), id, bs, p)
	})
	samePubs(t, "concurrent publishers", mustSegment(t, a, id).Publications, want...)
}

// publishAtOnce runs 24 publishers at once, each with a publication of
// its own (publish gets its index), fails the test on any error, and
// returns the publications.
func publishAtOnce(t *testing.T, what string, publish func(i int, p store.SegmentPublication) error) []store.SegmentPublication {
	t.Helper()
	const n = 24
	var wg sync.WaitGroup
	errs := make(chan error, n)
	var want []store.SegmentPublication
	for i := range n {
		p := segPub(fmt.Sprint("part-", i%6), nil, 1000, int64(5000+i))
		p.ScopeDigest = fmt.Sprint("digest-", i)
		want = append(want, p)
		wg.Go(func() { errs <- publish(i, p) })
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatalf("concurrent %s: %v", what, err)
		}
	}
	return want
}

func segLarge(t *testing.T, open SegmentOpener) {
	s, _ := open(t)
	b, id := segBytes("large", 6<<20)
	mustPublish(t, s, id, b, segPub("part-1", nil, 1, 2))
	if got := mustSegment(t, s, id); !bytes.Equal(got.Bytes, b) {
		t.Fatalf("a 6 MiB segment came back with %d bytes, not the published ones", len(got.Bytes))
	}
}

// bodyStore returns the store as a store.SegmentBodyStore, or skips.
func bodyStore(tb testing.TB, s store.SegmentStore) store.SegmentBodyStore {
	tb.Helper()
	bs, ok := s.(store.SegmentBodyStore)
	if !ok {
		tb.Skip("the store does not keep segment bodies")
	}
	return bs
}

// segBody returns compressible segment-like bytes, their address and their
// zstd body.
func segBody(tb testing.TB, seed string, n int) ([]byte, string, []byte) {
	tb.Helper()
	b := bytes.Repeat([]byte(seed+" row payload; "), n/(len(seed)+14)+1)[:n]
	sum := sha256.Sum256(b)
	enc, err := zstd.NewWriter(nil, zstd.WithEncoderLevel(zstd.SpeedFastest))
	if err != nil {
		tb.Fatal(err)
	}
	defer enc.Close()
	return b, "sha256:" + hex.EncodeToString(sum[:]), enc.EncodeAll(b, nil)
}

func mustPublishBody(tb testing.TB, s store.SegmentBodyStore, id string, n int, body []byte, p store.SegmentPublication) {
	tb.Helper()
	if err := s.PublishSegmentBody(context.Background(), id, int64(n), store.SegmentBodyZstd, body, p); err != nil {
		tb.Fatalf("PublishSegmentBody(%s): %v", id, err)
	}
}

func segBodyRoundTrip(t *testing.T, open SegmentOpener) {
	s0, _ := open(t)
	s := bodyStore(t, s0)
	ctx := context.Background()
	b, id, body := segBody(t, "body", 50_000)
	if len(body) >= len(b)/10 {
		t.Fatalf("test body of %d bytes for %d: not compressed", len(body), len(b))
	}
	p := segPub("part-1", nil, 1000, 5000)
	mustPublishBody(t, s, id, len(b), body, p)
	seg := mustSegment(t, s, id)
	if !bytes.Equal(seg.Bytes, b) || seg.Encoding != "" {
		t.Fatalf("Segment of a body returned %d bytes coded %q; want the %d bytes of the segment", len(seg.Bytes), seg.Encoding, len(b))
	}
	samePubs(t, "body", seg.Publications, p)
	raw, err := s.SegmentBody(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	if raw.Encoding != store.SegmentBodyZstd || !bytes.Equal(raw.Bytes, body) || raw.ByteLength != int64(len(b)) {
		t.Fatalf("SegmentBody = %d bytes coded %q, length %d; want the %d-byte zstd body of %d bytes",
			len(raw.Bytes), raw.Encoding, raw.ByteLength, len(body), len(b))
	}
	samePubs(t, "body, as stored", raw.Publications, p)
	// A segment stored as bytes reads the same through SegmentBody, uncoded.
	plain, plainID := segBytes("plain", 700)
	mustPublish(t, s, plainID, plain, p)
	if raw, err := s.SegmentBody(ctx, plainID); err != nil || raw.Encoding != "" || !bytes.Equal(raw.Bytes, plain) || raw.ByteLength != 700 {
		t.Fatalf("SegmentBody of stored bytes = %q %d bytes (length %d), %v; want the bytes uncoded", raw.Encoding, len(raw.Bytes), raw.ByteLength, err)
	}
	st, err := s.SegmentStats(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if st.Segments != 2 || st.Publications != 2 || st.Bytes != int64(len(b))+700 {
		t.Fatalf("SegmentStats = %+v; want 2 segments, 2 publications, %d bytes (the segments' own lengths)", st, len(b)+700)
	}
	if err := s.PublishSegmentBody(ctx, id, int64(len(b)), "br", body, p); err == nil {
		t.Fatal("a body in an unknown coding was accepted")
	}
	if _, err := s.SegmentBody(ctx, "sha256:"+hex.EncodeToString(make([]byte, 32))); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("SegmentBody of an unknown id: %v; want ErrNotFound", err)
	}
}

func segBodyAndBytes(t *testing.T, open SegmentOpener) {
	s0, _ := open(t)
	s := bodyStore(t, s0)
	ctx := context.Background()
	b, id, body := segBody(t, "both", 20_000)
	p := segPub("part-1", nil, 1000, 5000)
	mustPublishBody(t, s, id, len(b), body, p)
	// The bytes of a segment stored as a body add a publication and are
	// not stored again; nil bytes refresh it; another length collides.
	q := segPub("part-2", nil, 1000, 7000)
	mustPublish(t, s, id, b, q)
	r := segPub("part-3", nil, 1000, 8000)
	mustPublish(t, s, id, nil, r)
	if err := s.PublishSegment(ctx, id, b[:len(b)-1], segPub("part-4", nil, 1, 2)); err == nil {
		t.Fatal("bytes of another length under an id stored as a body were accepted")
	}
	if err := s.PublishSegmentBody(ctx, id, int64(len(b)+1), store.SegmentBodyZstd, body, segPub("part-4", nil, 1, 2)); err == nil {
		t.Fatal("a body of another length under a stored id was accepted")
	}
	raw, err := s.SegmentBody(ctx, id)
	if err != nil || raw.Encoding != store.SegmentBodyZstd || !bytes.Equal(raw.Bytes, body) {
		t.Fatalf("after publishing the bytes too: %q %d bytes, %v; want the body kept", raw.Encoding, len(raw.Bytes), err)
	}
	samePubs(t, "a body published three ways", raw.Publications, p, q, r)
	// A body of a segment stored as bytes keeps the bytes.
	plain, plainID := segBytes("plain-first", 900)
	mustPublish(t, s, plainID, plain, p)
	mustPublishBody(t, s, plainID, len(plain), []byte("not read"), q)
	raw, err = s.SegmentBody(ctx, plainID)
	if err != nil || raw.Encoding != "" || !bytes.Equal(raw.Bytes, plain) {
		t.Fatalf("a body published over stored bytes: %q %d bytes, %v; want the bytes kept", raw.Encoding, len(raw.Bytes), err)
	}
	samePubs(t, "bytes, then a body", raw.Publications, p, q)
}

// segBodyConcurrent: publishers of one new body at once, from every
// process of the store, all succeed, and every publication is kept with
// the one body.
func segBodyConcurrent(t *testing.T, open SegmentOpener) {
	a, share := open(t)
	stores := []store.SegmentBodyStore{bodyStore(t, a)}
	if share != nil {
		stores = append(stores, bodyStore(t, share(t)))
	}
	b, id, body := segBody(t, "race-body", 30_000)
	want := publishAtOnce(t, "PublishSegmentBody", func(i int, p store.SegmentPublication) error {
		return stores[i%len(stores)].PublishSegmentBody(context.Background(), id, int64(len(b)), store.SegmentBodyZstd, body, p)
	})
	raw, err := stores[0].SegmentBody(context.Background(), id)
	if err != nil || !bytes.Equal(raw.Bytes, body) || raw.ByteLength != int64(len(b)) {
		t.Fatalf("after concurrent publishers: %d bytes (length %d), %v; want the body", len(raw.Bytes), raw.ByteLength, err)
	}
	samePubs(t, "concurrent body publishers", raw.Publications, want...)
}

func segBodyFindSweep(t *testing.T, open SegmentOpener) {
	s0, _ := open(t)
	s := bodyStore(t, s0)
	ctx := context.Background()
	img, imgID, body := segBody(t, "image", 30_000)
	p := segPub("part-1", nil, 1000, 5000)
	p.MediaType, p.NextRowCursor = wire.MediaSQLite, nil
	mustPublishBody(t, s, imgID, len(img), body, p)
	rec, err := s.FindSegment(ctx, store.KeyOf(p), 2000)
	if err != nil || rec.ID != imgID || rec.ByteLength != int64(len(img)) {
		t.Fatalf("FindSegment of an image stored as a body = %s (%d bytes), %v; want %s of %d bytes", rec.ID, rec.ByteLength, err, imgID, len(img))
	}
	page, pageID, pageBody := segBody(t, "page", 10_000)
	mustPublishBody(t, s, pageID, len(page), pageBody, segPub("part-1", nil, 1000, 9000))
	sw, err := s.SweepSegments(ctx, 6000)
	if err != nil || sw.Segments != 1 || sw.Publications != 1 || sw.Bytes != int64(len(img)) {
		t.Fatalf("SweepSegments(6000) = %+v, %v; want the image (1 segment, 1 publication, %d bytes)", sw, err, len(img))
	}
	if _, err := s.Segment(ctx, imgID); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("a swept body: %v; want ErrNotFound", err)
	}
	if _, err := s.FindSegment(ctx, store.KeyOf(p), 2000); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("FindSegment of a swept body: %v; want ErrNotFound", err)
	}
	if got := mustSegment(t, s, pageID); !bytes.Equal(got.Bytes, page) {
		t.Fatal("the live body was changed by the sweep")
	}
	if err := s.PublishSegment(ctx, imgID, nil, p); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("refreshing a swept body: %v; want ErrNotFound", err)
	}
}

func segBodyShared(t *testing.T, open SegmentOpener) {
	a0, share := open(t)
	if share == nil {
		t.Skip("the store is not shared between processes")
	}
	a := bodyStore(t, a0)
	b := share(t)
	plain, id, body := segBody(t, "shared-body", 40_000)
	p := segPub("part-1", nil, 1000, 5000)
	mustPublishBody(t, a, id, len(plain), body, p)
	if got := mustSegment(t, b, id); !bytes.Equal(got.Bytes, plain) {
		t.Fatal("the other process read other bytes")
	}
	q := segPub("part-2", nil, 1000, 7000)
	mustPublish(t, b, id, nil, q)
	samePubs(t, "a body published by both", mustSegment(t, a, id).Publications, p, q)
}
