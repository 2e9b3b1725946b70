package blobs3

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/syncgo/syncgo/internal/s3test"
	"github.com/syncgo/syncgo/store"
	"github.com/syncgo/syncgo/store/storetest"
)

// testS3 returns options that reach a bucket of the test's own in an
// S3-compatible server (internal/s3test: a real one under CI).
func testS3(tb testing.TB) Options {
	tb.Helper()
	return options(s3test.Start(tb, "blobs"))
}

func options(srv s3test.Server) Options {
	return Options{Endpoint: srv.Endpoint, Insecure: true, Region: srv.Region, AccessKey: srv.AccessKey, SecretKey: srv.SecretKey,
		PathStyle: true, Bucket: srv.Bucket, Prefix: "syncgo/"}
}

// getURL GETs u without credentials: the status and the body.
func getURL(tb testing.TB, u string) (int, []byte) {
	tb.Helper()
	resp, err := http.Get(u)
	if err != nil {
		tb.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		tb.Fatal(err)
	}
	return resp.StatusCode, b
}

// readBlob opens a stored blob and reads it whole.
func readBlob(tb testing.TB, s *Store, partition, id string) (store.BlobInfo, []byte) {
	tb.Helper()
	info, rc, err := s.OpenBlob(context.Background(), partition, id)
	if err != nil {
		tb.Fatal(err)
	}
	defer rc.Close()
	got, err := io.ReadAll(rc)
	if err != nil {
		tb.Fatal(err)
	}
	return info, got
}

func mustOpen(tb testing.TB, o Options) *Store {
	tb.Helper()
	s, err := Open(o)
	if err != nil {
		tb.Fatal(err)
	}
	return s
}

func TestContract(t *testing.T) {
	storetest.RunBlobStore(t, func(tb testing.TB) (store.BlobStore, func(testing.TB) store.BlobStore) {
		o := testS3(tb)
		return mustOpen(tb, o), func(tb testing.TB) store.BlobStore { return mustOpen(tb, o) }
	})
}

func blob(n int) ([]byte, string) {
	b := bytes.Repeat([]byte("syncgo-s3-"), n/10+1)[:n]
	sum := sha256.Sum256(b)
	return b, "sha256:" + hex.EncodeToString(sum[:])
}

// A presigned GET is answered by the object store itself with the bytes,
// and stops working once it expired; another blob's key cannot be reached
// with it.
func TestPresignedGet(t *testing.T) {
	s := mustOpen(t, testS3(t))
	ctx := context.Background()
	b, id := blob(300 << 10)
	if err := s.PutBlob(ctx, "part-1", id, "image/png", bytes.NewReader(b), 10); err != nil {
		t.Fatal(err)
	}
	u, err := s.PresignBlobGet(ctx, "part-1", id, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.Get(u)
	if err != nil {
		t.Fatal(err)
	}
	got, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || !bytes.Equal(got, b) {
		t.Fatalf("presigned GET: %d, %d bytes; want 200 and the blob's %d", resp.StatusCode, len(got), len(b))
	}
	_, other := blob(7)
	u2, _ := s.PresignBlobGet(ctx, "part-1", other, time.Minute)
	if resp, err := http.Get(u2); err != nil || resp.StatusCode != 404 {
		t.Fatalf("presigned GET of a missing blob: %v, %v; want 404", resp, err)
	}
	if _, err := s.PresignBlobGet(ctx, "part-1", "../x", time.Minute); err == nil {
		t.Fatal("presigned a key that is not a blob id")
	}
}

// Against a server that checks signatures (internal/s3test's real one),
// a presigned GET is bound to its key, its signature and its expiry: the
// URL with another key, a changed signature, or past its expiry is
// refused, and a store with a wrong secret fails Check. gofakes3 checks
// none of these, so the test needs the real server.
func TestPresignedGetChecked(t *testing.T) {
	srv := s3test.Start(t, "blobs")
	if !srv.Real {
		t.Skipf("gofakes3 checks no signature; set %s", s3test.Env)
	}
	s := mustOpen(t, options(srv))
	ctx := context.Background()
	b, id := blob(1000)
	other, otherID := blob(1001)
	for _, p := range []struct {
		id string
		b  []byte
	}{{id, b}, {otherID, other}} {
		if err := s.PutBlob(ctx, "p", p.id, "", bytes.NewReader(p.b), 1); err != nil {
			t.Fatal(err)
		}
	}
	u, err := s.PresignBlobGet(ctx, "p", id, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if st, got := getURL(t, u); st != 200 || !bytes.Equal(got, b) {
		t.Fatalf("presigned GET: %d, %d bytes", st, len(got))
	}
	hexID, otherHex := strings.TrimPrefix(id, "sha256:"), strings.TrimPrefix(otherID, "sha256:")
	if st, got := getURL(t, strings.Replace(u, hexID, otherHex, 1)); st != 403 || bytes.Equal(got, other) {
		t.Fatalf("the URL moved to another blob's key: %d; want 403", st)
	}
	pu, _ := url.Parse(u)
	q := pu.Query()
	sig := []byte(q.Get("X-Amz-Signature"))
	sig[0] ^= 1
	q.Set("X-Amz-Signature", string(sig))
	pu.RawQuery = q.Encode()
	if st, _ := getURL(t, pu.String()); st != 403 {
		t.Fatalf("a changed signature: %d; want 403", st)
	}
	short, err := s.PresignBlobGet(ctx, "p", id, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(2100 * time.Millisecond)
	if st, _ := getURL(t, short); st != 403 {
		t.Fatalf("a presigned GET past its expiry: %d; want 403", st)
	}
	wrong := options(srv)
	wrong.SecretKey += "x"
	if err := mustOpen(t, wrong).Check(ctx); err == nil {
		t.Fatal("Check with a wrong secret reported no error")
	}
}

// An upload interrupted by a crash (a temporary object or an open
// multipart upload left behind) is swept by its start time; the media
// type round-trips; ids that are not content addresses never become keys.
func TestSweepAndKeys(t *testing.T) {
	o := testS3(t)
	s := mustOpen(t, o)
	ctx := context.Background()
	for _, k := range []string{"tmp/upload-100-aa", "tmp/upload-900-bb", "tmp/unrelated"} {
		if _, err := s.c.PutObject(ctx, o.Bucket, o.Prefix+k, strings.NewReader("x"), 1, minioPut()); err != nil {
			t.Fatal(err)
		}
	}
	if n, err := s.SweepUploads(ctx, 500); err != nil || n != 1 {
		t.Fatalf("SweepUploads(500) = %d, %v; want 1", n, err)
	}
	if _, err := s.c.StatObject(ctx, o.Bucket, o.Prefix+"tmp/upload-900-bb", minioStat()); err != nil {
		t.Fatal("a newer upload was swept")
	}
	b, id := blob(1000)
	if err := s.PutBlob(ctx, "p/../q", id, "text/plain; charset=utf-8", bytes.NewReader(b), 5); err != nil {
		t.Fatal(err)
	}
	info, err := s.StatBlob(ctx, "p/../q", id)
	if err != nil || info.MediaType != "text/plain; charset=utf-8" || info.Partition != "p/../q" {
		t.Fatalf("StatBlob = %+v, %v", info, err)
	}
	for _, bad := range []string{"../../etc/passwd", "sha256:" + strings.Repeat("A", 64)} {
		if err := s.PutBlob(ctx, "p", bad, "", bytes.NewReader(nil), 1); err == nil {
			t.Fatalf("PutBlob accepted the id %q", bad)
		}
		if _, err := s.StatBlob(ctx, "p", bad); err == nil || errors.Is(err, store.ErrNotFound) {
			t.Fatalf("StatBlob of the id %q: %v", bad, err)
		}
	}
}

type failAfter struct {
	r   io.Reader
	n   int
	err error
}

func (f *failAfter) Read(p []byte) (int, error) {
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

// A blob larger than a part streams as a multipart upload; a reader that
// fails after the first part was sent leaves no blob, no object and no
// open multipart upload behind.
func TestMultipart(t *testing.T) {
	o := testS3(t)
	s := mustOpen(t, o)
	ctx := context.Background()
	b, id := blob(2*partSize + 123)
	boom := errors.New("hash mismatch (test)")
	if err := s.PutBlob(ctx, "p", id, "", &failAfter{r: bytes.NewReader(b), n: partSize + 1000, err: boom}, 7); !errors.Is(err, boom) {
		t.Fatalf("PutBlob with a reader failing in the second part: %v; want its error", err)
	}
	if _, err := s.StatBlob(ctx, "p", id); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("StatBlob after an aborted multipart upload: %v", err)
	}
	for u := range s.c.ListIncompleteUploads(ctx, o.Bucket, o.Prefix, true) {
		if u.Err == nil {
			t.Fatalf("an aborted upload left the multipart upload %q open", u.Key)
		}
	}
	for oi := range s.c.ListObjects(ctx, o.Bucket, minioList(o.Prefix)) {
		t.Fatalf("an aborted upload left the object %q (%v)", oi.Key, oi.Err)
	}
	if err := s.PutBlob(ctx, "p", id, "", bytes.NewReader(b), 8); err != nil {
		t.Fatal(err)
	}
	info, got := readBlob(t, s, "p", id)
	if !bytes.Equal(got, b) || info.ByteLength != int64(len(b)) || info.CreatedAtMs != 8 {
		t.Fatalf("multipart blob: %d bytes, info %+v", len(got), info)
	}
	n := 0
	for oi := range s.c.ListObjects(ctx, o.Bucket, minioList(o.Prefix)) {
		if oi.Err != nil || !strings.HasPrefix(oi.Key, o.Prefix+"b/") {
			t.Fatalf("after an upload the bucket holds %q (%v)", oi.Key, oi.Err)
		}
		n++
	}
	if n != 1 {
		t.Fatalf("after one upload the bucket holds %d objects", n)
	}
}

// A blob larger than one server-side copy may hold (5 GiB on S3; the
// test lowers the limit to 1 MiB) reaches its key by a multipart copy,
// with its bytes, upload time and media type. gofakes3 lacks the
// multipart copy, so the test needs the real server.
func TestMultipartCopy(t *testing.T) {
	srv := s3test.Start(t, "blobs")
	if !srv.Real {
		t.Skipf("gofakes3 has no multipart copy; set %s", s3test.Env)
	}
	s := mustOpen(t, options(srv))
	s.maxCopy = 1 << 20
	ctx := context.Background()
	b, id := blob(3<<20 + 77)
	if err := s.PutBlob(ctx, "p", id, "video/mp4", bytes.NewReader(b), 42); err != nil {
		t.Fatal(err)
	}
	info, got := readBlob(t, s, "p", id)
	if !bytes.Equal(got, b) || info.ByteLength != int64(len(b)) || info.CreatedAtMs != 42 || info.MediaType != "video/mp4" {
		t.Fatalf("a blob copied in parts: %d bytes, info %+v", len(got), info)
	}
	for oi := range s.c.ListObjects(ctx, srv.Bucket, minioList("syncgo/tmp/")) {
		t.Fatalf("the upload left %q (%v)", oi.Key, oi.Err)
	}
}

// A bucket that does not exist fails Check (serve's start) and every
// upload. (A HEAD answer has no body, so a stat cannot tell a missing
// bucket from a missing object: Check is what catches it.)
func TestMissingBucket(t *testing.T) {
	o := testS3(t)
	o.Bucket = "no-such-bucket"
	s := mustOpen(t, o)
	ctx := context.Background()
	b, id := blob(10)
	if err := s.Check(ctx); err == nil || !strings.Contains(err.Error(), "does not exist") {
		t.Fatalf("Check of a missing bucket: %v", err)
	}
	if err := s.PutBlob(ctx, "p", id, "", bytes.NewReader(b), 1); err == nil {
		t.Fatal("PutBlob into a missing bucket reported no error")
	}
}
