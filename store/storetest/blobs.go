package storetest

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/syncgo/syncgo/store"
)

// BlobOpener returns a blob store on a fresh, empty database or
// directory, and a function that opens another blob store on the same one
// (another server process), or nil when it cannot be shared.
type BlobOpener func(tb testing.TB) (s store.BlobStore, share func(tb testing.TB) store.BlobStore)

// RunBlobs runs the blob-store tests against the store.BlobStorer of the
// driver's stores, and the tests of the blob reference index
// (store.BlobRefIndex, store.BlobRefWriter). A driver without them skips.
func RunBlobs(t *testing.T, open Opener) {
	t.Run("Store", func(t *testing.T) {
		RunBlobStore(t, func(tb testing.TB) (store.BlobStore, func(testing.TB) store.BlobStore) {
			s := open(tb)
			bs, ok := s.(store.BlobStorer)
			if !ok {
				tb.Skip("the driver has no blob store")
			}
			r, ok := s.(Reopener)
			if !ok {
				return bs.BlobStore(), nil
			}
			return bs.BlobStore(), func(tb testing.TB) store.BlobStore {
				return r.Reopen(tb).(store.BlobStorer).BlobStore()
			}
		})
	})
	t.Run("OrphanChunks", func(t *testing.T) {
		t.Parallel()
		blobOrphanChunks(t, open)
	})
	t.Run("RefIndex", func(t *testing.T) {
		t.Parallel()
		blobRefIndex(t, open)
	})
}

// RunBlobStore runs the tests of the store.BlobStore contract.
func RunBlobStore(t *testing.T, open BlobOpener) {
	cases := []struct {
		name string
		run  func(t *testing.T, open BlobOpener)
	}{
		{"RoundTrip", blobRoundTrip},
		{"Empty", blobEmpty},
		{"Partitions", blobPartitions},
		{"AbortedUpload", blobAborted},
		{"Reupload", blobReupload},
		{"ListDelete", blobListDelete},
		{"Concurrent", blobConcurrent},
		{"Shared", blobShared},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			c.run(t, open)
		})
	}
}

// blobBytes returns n deterministic bytes and their content address.
func blobBytes(seed string, n int) ([]byte, string) {
	b, _ := segBytes(seed, n)
	sum := sha256.Sum256(b)
	return b, "sha256:" + hex.EncodeToString(sum[:])
}

func mustPutBlob(tb testing.TB, s store.BlobStore, partition, id string, b []byte, nowMs int64) {
	tb.Helper()
	if err := s.PutBlob(context.Background(), partition, id, "application/test", bytes.NewReader(b), nowMs); err != nil {
		tb.Fatalf("PutBlob(%s): %v", id, err)
	}
}

func readBlob(tb testing.TB, s store.BlobStore, partition, id string) (store.BlobInfo, []byte) {
	tb.Helper()
	info, rc, err := s.OpenBlob(context.Background(), partition, id)
	if err != nil {
		tb.Fatalf("OpenBlob(%s): %v", id, err)
	}
	defer rc.Close()
	b, err := io.ReadAll(rc)
	if err != nil {
		tb.Fatalf("read blob %s: %v", id, err)
	}
	return info, b
}

func wantNoBlob(tb testing.TB, s store.BlobStore, partition, id, what string) {
	tb.Helper()
	if _, err := s.StatBlob(context.Background(), partition, id); !errors.Is(err, store.ErrNotFound) {
		tb.Fatalf("%s: StatBlob = %v; want ErrNotFound", what, err)
	}
	if _, _, err := s.OpenBlob(context.Background(), partition, id); !errors.Is(err, store.ErrNotFound) {
		tb.Fatalf("%s: OpenBlob = %v; want ErrNotFound", what, err)
	}
}

func blobRoundTrip(t *testing.T, open BlobOpener) {
	s, _ := open(t)
	for _, n := range []int{1, 1000, 256 << 10, 256<<10 + 1, 3<<20 + 17} {
		b, id := blobBytes(fmt.Sprint("rt-", n), n)
		mustPutBlob(t, s, "part-1", id, b, 5000)
		info, got := readBlob(t, s, "part-1", id)
		if !bytes.Equal(got, b) {
			t.Fatalf("%d bytes: read back %d other bytes", n, len(got))
		}
		if info.Partition != "part-1" || info.BlobID != id || info.ByteLength != int64(n) || info.CreatedAtMs != 5000 ||
			(info.MediaType != "" && info.MediaType != "application/test") {
			t.Fatalf("%d bytes: info %+v", n, info)
		}
		st, err := s.StatBlob(context.Background(), "part-1", id)
		if err != nil || st != info {
			t.Fatalf("StatBlob = %+v, %v; OpenBlob said %+v", st, err, info)
		}
	}
}

func blobEmpty(t *testing.T, open BlobOpener) {
	s, _ := open(t)
	b, id := blobBytes("empty", 0)
	mustPutBlob(t, s, "part-1", id, b, 1)
	info, got := readBlob(t, s, "part-1", id)
	if len(got) != 0 || info.ByteLength != 0 {
		t.Fatalf("empty blob: %d bytes, info %+v", len(got), info)
	}
}

func blobPartitions(t *testing.T, open BlobOpener) {
	s, _ := open(t)
	b, id := blobBytes("part", 100)
	mustPutBlob(t, s, "part-1", id, b, 1)
	wantNoBlob(t, s, "part-2", id, "the same blob in another partition")
	mustPutBlob(t, s, "part-2", id, b, 2)
	if ok, err := s.DeleteBlob(context.Background(), "part-1", id, 10); !ok || err != nil {
		t.Fatalf("DeleteBlob = %v, %v", ok, err)
	}
	if _, got := readBlob(t, s, "part-2", id); !bytes.Equal(got, b) {
		t.Fatal("deleting a blob in one partition changed another's")
	}
}

// failingReader yields n bytes of b, then fails.
type failingReader struct {
	r   io.Reader
	n   int
	err error
}

func (f *failingReader) Read(p []byte) (int, error) {
	if f.n <= 0 {
		return 0, f.err
	}
	if len(p) > f.n {
		p = p[:f.n]
	}
	n, err := f.r.Read(p)
	f.n -= n
	return n, err
}

func blobAborted(t *testing.T, open BlobOpener) {
	s, _ := open(t)
	ctx := context.Background()
	b, id := blobBytes("abort", 1<<20)
	boom := errors.New("hash mismatch (test)")
	for _, at := range []int{0, 1000, 600 << 10} {
		err := s.PutBlob(ctx, "part-1", id, "", &failingReader{r: bytes.NewReader(b), n: at, err: boom}, 1)
		if !errors.Is(err, boom) {
			t.Fatalf("PutBlob with a reader failing after %d bytes: %v; want its error", at, err)
		}
		wantNoBlob(t, s, "part-1", id, fmt.Sprintf("an upload aborted after %d bytes", at))
	}
	if n, err := s.SweepUploads(ctx, 1<<62); err != nil || n != 0 {
		t.Fatalf("SweepUploads after aborted uploads = %d, %v; want nothing left behind", n, err)
	}
	l, _, err := s.ListBlobs(ctx, 1<<62, "", 10)
	if err != nil || len(l) != 0 {
		t.Fatalf("ListBlobs after aborted uploads = %v, %v; want none", l, err)
	}
}

func blobReupload(t *testing.T, open BlobOpener) {
	s, _ := open(t)
	ctx := context.Background()
	b, id := blobBytes("again", 300<<10)
	mustPutBlob(t, s, "part-1", id, b, 1000)
	// A re-upload is read to its end and moves the upload time; a failing
	// one fails and moves nothing.
	boom := errors.New("truncated (test)")
	if err := s.PutBlob(ctx, "part-1", id, "", &failingReader{r: bytes.NewReader(b), n: 1000, err: boom}, 9000); !errors.Is(err, boom) {
		t.Fatalf("a failing re-upload: %v; want its error", err)
	}
	if info, _ := s.StatBlob(ctx, "part-1", id); info.CreatedAtMs != 1000 {
		t.Fatalf("a failed re-upload moved CreatedAtMs to %d", info.CreatedAtMs)
	}
	r := &countingReader{r: bytes.NewReader(b)}
	if err := s.PutBlob(ctx, "part-1", id, "", r, 5000); err != nil {
		t.Fatal(err)
	}
	if r.n != int64(len(b)) {
		t.Fatalf("a re-upload read %d of %d bytes; want all (the caller's verification runs at EOF)", r.n, len(b))
	}
	info, got := readBlob(t, s, "part-1", id)
	if info.CreatedAtMs != 5000 || !bytes.Equal(got, b) {
		t.Fatalf("after a re-upload: CreatedAtMs %d, bytes equal %v", info.CreatedAtMs, bytes.Equal(got, b))
	}
}

type countingReader struct {
	r io.Reader
	n int64
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += int64(n)
	return n, err
}

func blobListDelete(t *testing.T, open BlobOpener) {
	s, _ := open(t)
	ctx := context.Background()
	var want []string
	for i := range 7 {
		b, id := blobBytes(fmt.Sprint("list-", i), 10+i)
		part := fmt.Sprint("part-", i%3)
		mustPutBlob(t, s, part, id, b, int64(100*i))
		if 100*i < 500 {
			want = append(want, part+"/"+id)
		}
	}
	var got []string
	cursor := ""
	for range 10 {
		page, next, err := s.ListBlobs(ctx, 500, cursor, 2)
		if err != nil {
			t.Fatal(err)
		}
		for _, i := range page {
			if i.CreatedAtMs >= 500 {
				t.Fatalf("ListBlobs(before 500) listed one created at %d", i.CreatedAtMs)
			}
			got = append(got, i.Partition+"/"+i.BlobID)
		}
		if next == "" {
			break
		}
		cursor = next
	}
	slices.Sort(got)
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Fatalf("ListBlobs pages listed %v; want %v", got, want)
	}
	b, id := blobBytes("list-3", 13)
	if ok, err := s.DeleteBlob(ctx, "part-0", id, 300); ok || err != nil {
		t.Fatalf("DeleteBlob of a blob created at 300, before 300: %v, %v; want kept", ok, err)
	}
	if ok, err := s.DeleteBlob(ctx, "part-0", id, 301); !ok || err != nil {
		t.Fatalf("DeleteBlob before 301: %v, %v; want deleted", ok, err)
	}
	wantNoBlob(t, s, "part-0", id, "a deleted blob")
	if ok, err := s.DeleteBlob(ctx, "part-0", id, 301); ok || err != nil {
		t.Fatalf("DeleteBlob of a deleted blob: %v, %v", ok, err)
	}
	// Stored again after a delete: the bytes are back.
	mustPutBlob(t, s, "part-0", id, b, 900)
	if _, got := readBlob(t, s, "part-0", id); !bytes.Equal(got, b) {
		t.Fatal("a blob stored again after its delete reads other bytes")
	}
}

func blobConcurrent(t *testing.T, open BlobOpener) {
	a, share := open(t)
	stores := []store.BlobStore{a}
	if share != nil {
		stores = append(stores, share(t))
	}
	b, id := blobBytes("race", 600<<10)
	var wg sync.WaitGroup
	errs := make(chan error, 6)
	for i := range 6 {
		wg.Add(1)
		go func(s store.BlobStore) {
			defer wg.Done()
			errs <- s.PutBlob(context.Background(), "part-1", id, "", bytes.NewReader(b), int64(10+i))
		}(stores[i%len(stores)])
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatalf("concurrent PutBlob: %v", err)
		}
	}
	if _, got := readBlob(t, a, "part-1", id); !bytes.Equal(got, b) {
		t.Fatal("concurrent uploads of one blob left other bytes")
	}
	if n, err := a.SweepUploads(context.Background(), 1<<62); err != nil || n != 0 {
		t.Fatalf("SweepUploads after concurrent uploads = %d, %v; want nothing left behind", n, err)
	}
	l, _, err := a.ListBlobs(context.Background(), 1<<62, "", 10)
	if err != nil || len(l) != 1 {
		t.Fatalf("ListBlobs after concurrent uploads of one blob = %d, %v; want 1", len(l), err)
	}
}

func blobShared(t *testing.T, open BlobOpener) {
	a, share := open(t)
	if share == nil {
		t.Skip("the store is not shared between processes")
	}
	b := share(t)
	bs, id := blobBytes("shared", 400<<10)
	mustPutBlob(t, a, "part-1", id, bs, 1)
	if _, got := readBlob(t, b, "part-1", id); !bytes.Equal(got, bs) {
		t.Fatal("the other process read other bytes")
	}
	if ok, err := b.DeleteBlob(context.Background(), "part-1", id, 2); !ok || err != nil {
		t.Fatalf("DeleteBlob from the other process: %v, %v", ok, err)
	}
	wantNoBlob(t, a, "part-1", id, "deleted by the other process")
}

// blobOrphanChunks: bytes an upload left behind (a crash mid-upload,
// written here with raw SQL) are swept once older than the cutoff.
func blobOrphanChunks(t *testing.T, open Opener) {
	s := open(t)
	bs, ok := s.(store.BlobStorer)
	raw, rok := s.(RawExecer)
	if !ok || !rok {
		t.Skip("the driver has no blob store or no raw SQL")
	}
	ctx := context.Background()
	const script = `INSERT INTO sync_blob_chunks(upload_id, idx, started_at_ms, bytes) VALUES ('crashed', 0, 100, X'0102');
INSERT INTO sync_blob_chunks(upload_id, idx, started_at_ms, bytes) VALUES ('crashed', 1, 100, X'0304');
INSERT INTO sync_blob_chunks(upload_id, idx, started_at_ms, bytes) VALUES ('running', 0, 900, X'05')`
	execScript(t, raw, script, strings.NewReplacer("X'0102'", `'\x0102'::bytea`, "X'0304'", `'\x0304'::bytea`, "X'05'", `'\x05'::bytea`).Replace(script))
	b, id := blobBytes("kept", 10)
	mustPutBlob(t, bs.BlobStore(), "part-1", id, b, 50)
	n, err := bs.BlobStore().SweepUploads(ctx, 500)
	if err != nil || n != 2 {
		t.Fatalf("SweepUploads(500) = %d, %v; want the 2 chunks of the crashed upload", n, err)
	}
	if _, got := readBlob(t, bs.BlobStore(), "part-1", id); !bytes.Equal(got, b) {
		t.Fatal("SweepUploads removed a stored blob's bytes")
	}
	if n, err := bs.BlobStore().SweepUploads(ctx, 1000); err != nil || n != 1 {
		t.Fatalf("SweepUploads(1000) = %d, %v; want the running upload's chunk", n, err)
	}
}

func blobRefIndex(t *testing.T, open Opener) {
	s := open(t)
	idx, ok := s.(store.BlobRefIndex)
	if !ok {
		t.Skip("the driver has no blob reference index")
	}
	ctx := context.Background()
	for _, p := range []string{"part-1", "part-2"} {
		if _, err := s.TouchPartition(ctx, p, 1, "epoch-"+p); err != nil {
			t.Fatal(err)
		}
	}
	set := func(partition, table, rowID string, ids ...string) error {
		return s.Write(ctx, partition, func(ctx context.Context, tx store.WriteTx) error {
			w, ok := tx.(store.BlobRefWriter)
			if !ok {
				t.Fatal("the write transaction has no SetBlobRefs")
			}
			return w.SetBlobRefs(ctx, table, rowID, ids)
		})
	}
	list := func(partition, id string) []string {
		t.Helper()
		var out []string
		var after *store.BlobRef
		for {
			page, err := idx.BlobRefs(ctx, partition, id, after, 2)
			if err != nil {
				t.Fatal(err)
			}
			for _, r := range page {
				out = append(out, r.Table+"/"+r.RowID)
			}
			if len(page) < 2 {
				return out
			}
			after = &page[len(page)-1]
		}
	}
	_, x := blobBytes("x", 1)
	_, y := blobBytes("y", 1)
	for _, c := range []struct {
		table, row string
		ids        []string
	}{
		{"tasks", "r2", []string{x}}, {"tasks", "r1", []string{x, y}}, {"notes", "r9", []string{x}},
		{"tasks", "R3", []string{x}}, {"tasks", "r10", []string{y}},
	} {
		if err := set("part-1", c.table, c.row, c.ids...); err != nil {
			t.Fatal(err)
		}
	}
	if err := set("part-2", "tasks", "r1", x); err != nil {
		t.Fatal(err)
	}
	if got, want := list("part-1", x), []string{"notes/r9", "tasks/R3", "tasks/r1", "tasks/r2"}; !slices.Equal(got, want) {
		t.Fatalf("refs of x = %v; want %v (bytewise, paged)", got, want)
	}
	if got, want := list("part-1", y), []string{"tasks/r1", "tasks/r10"}; !slices.Equal(got, want) {
		t.Fatalf("refs of y = %v; want %v", got, want)
	}
	// Replace r1's set, clear r2's; a rolled-back write changes nothing.
	if err := set("part-1", "tasks", "r1", y); err != nil {
		t.Fatal(err)
	}
	if err := set("part-1", "tasks", "r2"); err != nil {
		t.Fatal(err)
	}
	boom := errors.New("rollback")
	err := s.Write(ctx, "part-1", func(ctx context.Context, tx store.WriteTx) error {
		if err := tx.(store.BlobRefWriter).SetBlobRefs(ctx, "tasks", "R3", nil); err != nil {
			return err
		}
		return boom
	})
	if !errors.Is(err, boom) {
		t.Fatal(err)
	}
	err = s.Write(ctx, "part-1", func(ctx context.Context, tx store.WriteTx) error {
		return tx.Candidate(ctx, func(ctx context.Context) error {
			if err := tx.(store.BlobRefWriter).SetBlobRefs(ctx, "notes", "r9", []string{y}); err != nil {
				return err
			}
			return boom
		})
	})
	if !errors.Is(err, boom) {
		t.Fatal(err)
	}
	if got, want := list("part-1", x), []string{"notes/r9", "tasks/R3"}; !slices.Equal(got, want) {
		t.Fatalf("refs of x after the updates = %v; want %v", got, want)
	}
	if got, want := list("part-2", x), []string{"tasks/r1"}; !slices.Equal(got, want) {
		t.Fatalf("refs of x in part-2 = %v; want %v", got, want)
	}
}
