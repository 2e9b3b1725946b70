package syncgo_test

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/syncgo/syncgo"
	"github.com/syncgo/syncgo/blobfs"
	"github.com/syncgo/syncgo/internal/sspclient"
	"github.com/syncgo/syncgo/internal/urlsign"
	"github.com/syncgo/syncgo/schema"
	"github.com/syncgo/syncgo/store"
	"github.com/syncgo/syncgo/syncerr"
	"github.com/syncgo/syncgo/validate"
	"github.com/syncgo/syncgo/wire"
)

// blobKind is a storage driver with a blob store: the database's own, or
// a filesystem directory beside it, or an S3-compatible object store
// (internal/s3test: a real one under CI, gofakes3 elsewhere).
type blobKind struct {
	name   string
	driver e2eDriver
	fs     bool
	s3     bool
}

var blobKinds = []blobKind{
	{"sqlite", e2eDrivers[0], false, false},
	{"postgres", e2eDrivers[1], false, false},
	{"sqlite+fs", e2eDrivers[0], true, false},
	{"postgres+s3", e2eDrivers[1], false, true},
}

func forEachBlobKind(t *testing.T, fn func(t *testing.T, k blobKind)) {
	t.Helper()
	for _, k := range blobKinds {
		t.Run(k.name, func(t *testing.T) {
			t.Parallel()
			fn(t, k)
		})
	}
}

// blobSchema is a table with a blob_ref column, scoped by project.
func blobSchema(t *testing.T) *schema.Compiled {
	t.Helper()
	c, err := schema.New(1).
		Table("attachments", "id", schema.String("id"), schema.String("project_id"), schema.String("title"),
			schema.BlobRef("file").Null()).
		Scope("project:{project_id}").
		Compile()
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// blobEnv is a server with blobs and signed URLs over real HTTP.
type blobEnv struct {
	*e2eEnv
	node  *fleetNode
	clock *clock
	blobs store.BlobStore
}

func newBlobEnv(t *testing.T, k blobKind, tweak ...func(*syncgo.Config)) *blobEnv {
	t.Helper()
	e := &e2eEnv{t: t, schema: blobSchema(t), allowed: map[string]map[string][]string{}, store: k.driver.open(t)}
	c := newClock()
	be := &blobEnv{e2eEnv: e, clock: c}
	if k.s3 {
		be.blobs = s3Blobs(t)
	} else if k.fs {
		fs, err := blobfs.Open(t.TempDir())
		if err != nil {
			t.Fatal(err)
		}
		be.blobs = fs
	} else {
		be.blobs = e.store.(store.BlobStorer).BlobStore()
	}
	be.node = startNode(t, e, e.store, append([]func(*syncgo.Config){func(cfg *syncgo.Config) {
		cfg.Now = c.now
		cfg.Blobs = be.blobs
		cfg.BlobSweepInterval = -1
		cfg.SignedURLs = &syncgo.SignedURLConfig{Key: signKeyA}
	}}, tweak...)...)
	e.srv, e.url = be.node.srv, be.node.http.URL
	return be
}

func blobOf(data []byte) string {
	sum := sha256.Sum256(data)
	return "sha256:" + hex.EncodeToString(sum[:])
}

func blobRef(id string, n int) string {
	return fmt.Sprintf(`{"blobId":"%s","byteLength":%d}`, id, n)
}

// httpAnswer is a response's status, catalog code and body.
type httpAnswer struct {
	status int
	code   string
	body   []byte
	header http.Header
}

func (e *blobEnv) do(method, path, actor string, body io.Reader, header ...string) httpAnswer {
	e.t.Helper()
	u := path
	if !strings.HasPrefix(u, "http") {
		u = e.url + path
	}
	req, err := http.NewRequest(method, u, body)
	if err != nil {
		e.t.Fatal(err)
	}
	if actor != "" {
		req.Header.Set("Authorization", "Bearer "+actor)
	}
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		e.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		e.t.Fatal(err)
	}
	a := httpAnswer{status: resp.StatusCode, body: b, header: resp.Header}
	if resp.StatusCode >= 400 {
		a.code = errorCode(b)
	}
	return a
}

func (e *blobEnv) put(actor string, data []byte, id string, header ...string) httpAnswer {
	e.t.Helper()
	return e.do(http.MethodPut, "/blobs/"+id, actor, bytes.NewReader(data), header...)
}

func (e *blobEnv) get(actor, id string) httpAnswer {
	e.t.Helper()
	return e.do(http.MethodGet, "/blobs/"+id, actor, nil)
}

func wantAnswer(t *testing.T, what string, a httpAnswer, status int, code string) {
	t.Helper()
	if a.status != status || a.code != code {
		body := a.body
		if len(body) > 200 {
			body = body[:200]
		}
		t.Fatalf("%s: HTTP %d %s (%s); want HTTP %d %s", what, a.status, a.code, body, status, code)
	}
}

func (e *blobEnv) wantStored(id string, stored bool) {
	e.t.Helper()
	_, err := e.blobs.StatBlob(context.Background(), e2ePartition, id)
	if stored && err != nil {
		e.t.Fatalf("blob %s is not stored: %v", id, err)
	}
	if !stored && !errors.Is(err, store.ErrNotFound) {
		e.t.Fatalf("blob %s: StatBlob = %v; want nothing stored", id, err)
	}
}

// refsOf lists the rows the reference index holds for a blob.
func (e *blobEnv) refsOf(id string) []string {
	e.t.Helper()
	refs, err := e.store.(store.BlobRefIndex).BlobRefs(context.Background(), e2ePartition, id, nil, 100)
	if err != nil {
		e.t.Fatal(err)
	}
	var out []string
	for _, r := range refs {
		out = append(out, r.Table+"/"+r.RowID)
	}
	return out
}

// attach pushes an attachments row through a client and returns its
// outcome.
func (e *blobEnv) attach(c *sspclient.Client, id, project string, ref *string) sspclient.Outcome {
	e.t.Helper()
	var file any
	if ref != nil {
		file = *ref
	}
	cid, err := c.Upsert("attachments", map[string]any{"id": id, "project_id": project, "title": "t", "file": file})
	if err != nil {
		e.t.Fatal(err)
	}
	syncQuiet(e.t, c)
	o, ok := c.Outcome(cid)
	if !ok {
		e.t.Fatalf("no outcome for %s", cid)
	}
	return o
}

func ptr(s string) *string { return &s }

// Upload, reference, download (§5.9.3-§5.9.6) over real HTTP: a push
// referencing an absent blob is rejected with blob.not_found and changes
// nothing; after the upload it applies and the reference index holds the
// row; the bytes download with the §5.9.5 headers for an actor of the
// scope, and are refused to actors of other scopes (blob.forbidden, never
// a capability of the id), re-checked on each download; updates and
// deletes keep the index; an unknown blob is blob.not_found.
func TestE2EBlobsUploadReferenceDownload(t *testing.T) {
	forEachBlobKind(t, func(t *testing.T, k blobKind) {
		e := newBlobEnv(t, k)
		e.allow("alice", map[string][]string{"project_id": {"p1"}})
		e.allow("bob", map[string][]string{"project_id": {"p1"}})
		e.allow("mallory", map[string][]string{"project_id": {"p2"}})
		e.allow("nobody", map[string][]string{})
		data := bytes.Repeat([]byte("attachment "), 40000) // 440 KB: more than one chunk
		id := blobOf(data)
		alice := e.client("alice", sspclient.Options{})

		if o := e.attach(alice, "a1", "p1", ptr(blobRef(id, len(data)))); o.Status != wire.PushRejected || o.ErrorCode() != syncerr.CodeBlobNotFound {
			t.Fatalf("push referencing a blob never uploaded: %s; want rejected blob.not_found", statusOf(o))
		}
		if rows := e.serverRows("attachments"); len(rows) != 0 || len(e.refsOf(id)) != 0 {
			t.Fatalf("a rejected push left %d rows and refs %v", len(rows), e.refsOf(id))
		}

		wantAnswer(t, "upload", e.put("alice", data, id, "Content-Type", "image/x-test"), 200, "")
		e.wantStored(id, true)
		wantAnswer(t, "upload again (idempotent)", e.put("bob", data, id), 200, "")
		if o := e.attach(alice, "a1", "p1", ptr(blobRef(id, len(data)))); o.Status != wire.PushApplied {
			t.Fatalf("push referencing the uploaded blob: %s", statusOf(o))
		}
		if got := e.refsOf(id); !slices.Equal(got, []string{"attachments/a1"}) {
			t.Fatalf("reference index of the blob = %v", got)
		}

		a := e.get("bob", id)
		wantAnswer(t, "download by another actor of the scope", a, 200, "")
		if !bytes.Equal(a.body, data) || a.header.Get("Content-Type") != "image/x-test" && !k.fs ||
			a.header.Get("X-Content-Type-Options") != "nosniff" || !strings.HasPrefix(a.header.Get("Content-Security-Policy"), "sandbox") ||
			a.header.Get("ETag") != `"`+id+`"` || a.header.Get("Cache-Control") != "private, max-age=0" {
			t.Fatalf("download: %d bytes, headers %v", len(a.body), a.header)
		}
		wantAnswer(t, "download of a blob referenced only in another scope", e.get("mallory", id), 403, syncerr.CodeBlobForbidden)
		wantAnswer(t, "download by an actor with no scopes", e.get("nobody", id), 403, syncerr.CodeBlobForbidden)
		wantAnswer(t, "download without credentials", e.get("", id), 401, syncerr.CodeAuthRequired)
		wantAnswer(t, "download of an unknown blob", e.get("bob", blobOf([]byte("never"))), 404, syncerr.CodeBlobNotFound)
		wantAnswer(t, "download of a malformed id", e.get("bob", "sha256:xyz"), 404, syncerr.CodeBlobNotFound)
		wantAnswer(t, "download from another partition", e.get("bob@tenant-2", id), 404, syncerr.CodeBlobNotFound)
		// If-None-Match is a list of tags compared weakly, or "*" (RFC 9110).
		for _, inm := range []string{`"` + id + `"`, `"other", "` + id + `"`, `W/"` + id + `"`, `*`} {
			if a := e.do(http.MethodGet, "/blobs/"+id, "bob", nil, "If-None-Match", inm); a.status != http.StatusNotModified {
				t.Fatalf("conditional download with If-None-Match %s: HTTP %d", inm, a.status)
			}
		}
		if a := e.do(http.MethodGet, "/blobs/"+id, "bob", nil, "If-None-Match", `"other"`); a.status != http.StatusOK {
			t.Fatalf("conditional download with another tag: HTTP %d", a.status)
		}

		// Authorization is re-checked on every download.
		e.allow("bob", map[string][]string{"project_id": {"p3"}})
		wantAnswer(t, "download after bob lost the scope", e.get("bob", id), 403, syncerr.CodeBlobForbidden)
		e.allow("bob", nil) // the resolver fails
		wantAnswer(t, "download while the resolver fails", e.get("bob", id), 403, syncerr.CodeBlobForbidden)

		// A row in p2 references the same blob too: mallory may download.
		root := e.client("root", sspclient.Options{})
		if o := e.attach(root, "a3", "p2", ptr(blobRef(id, len(data)))); o.Status != wire.PushApplied {
			t.Fatalf("a second referencing row: %s", statusOf(o))
		}
		wantAnswer(t, "download by mallory once a p2 row references the blob", e.get("mallory", id), 200, "")
		if got := e.refsOf(id); !slices.Equal(got, []string{"attachments/a1", "attachments/a3"}) {
			t.Fatalf("reference index = %v", got)
		}
		// a1 is deleted: only the p2 row references the blob.
		if _, err := root.Delete("attachments", "a1"); err != nil {
			t.Fatal(err)
		}
		syncQuiet(t, root)
		wantAnswer(t, "download by alice after the p1 row was deleted", e.get("alice", id), 403, syncerr.CodeBlobForbidden)
		wantAnswer(t, "download by mallory after the p1 row was deleted", e.get("mallory", id), 200, "")

		// Another blob replaces it in a3, then the column is cleared, then
		// the row is deleted: the index follows.
		data2 := []byte("second file")
		id2 := blobOf(data2)
		wantAnswer(t, "upload 2", e.put("alice", data2, id2), 200, "")
		if o := e.attach(root, "a3", "p2", ptr(blobRef(id2, len(data2)))); o.Status != wire.PushApplied {
			t.Fatal(statusOf(o))
		}
		if got, got2 := e.refsOf(id), e.refsOf(id2); len(got) != 0 || !slices.Equal(got2, []string{"attachments/a3"}) {
			t.Fatalf("after replacing a3's blob: refs %v and %v", got, got2)
		}
		if o := e.attach(root, "a3", "p2", nil); o.Status != wire.PushApplied {
			t.Fatal(statusOf(o))
		}
		if got2 := e.refsOf(id2); len(got2) != 0 {
			t.Fatalf("after clearing the column: refs %v", got2)
		}
		if o := e.attach(root, "a3", "p2", ptr(blobRef(id2, len(data2)))); o.Status != wire.PushApplied {
			t.Fatal(statusOf(o))
		}
		if _, err := root.Delete("attachments", "a3"); err != nil {
			t.Fatal(err)
		}
		syncQuiet(t, root)
		if got, got2 := e.refsOf(id), e.refsOf(id2); len(got) != 0 || len(got2) != 0 {
			t.Fatalf("after the delete: refs %v and %v", got, got2)
		}
		wantAnswer(t, "download of a blob no row references", e.get("alice", id), 403, syncerr.CodeBlobForbidden)
	})
}

// Hostile uploads: bytes that do not hash to the id (also an existing
// id), an id that is not a content address, an upload over the cap
// (declared, and streamed without a length), a body cut short and a body
// that stalls: each gets its code and stores nothing.
func TestE2EBlobsHostileUploads(t *testing.T) {
	forEachBlobKind(t, func(t *testing.T, k blobKind) {
		e := newBlobEnv(t, k, func(c *syncgo.Config) {
			c.Limits.MaxBlobBytes = 1 << 20
			c.StallTimeout = 300 * time.Millisecond
		})
		data := bytes.Repeat([]byte{7}, 300<<10)
		id := blobOf(data)
		bad := append(bytes.Clone(data[:len(data)-1]), 8)
		wantAnswer(t, "mismatching bytes", e.put("alice", bad, id), 400, syncerr.CodeBlobHashMismatch)
		e.wantStored(id, false)
		wantAnswer(t, "a malformed id", e.put("alice", data, "sha256:"+strings.Repeat("G", 64)), 400, syncerr.CodeBlobHashMismatch)
		wantAnswer(t, "an upload without credentials", e.put("", data, id), 401, syncerr.CodeAuthRequired)

		big := bytes.Repeat([]byte{1}, 1<<20+1)
		wantAnswer(t, "over the cap, declared", e.put("alice", big, blobOf(big)), 413, syncerr.CodeBlobTooLarge)
		// Without a Content-Length (chunked), the streamed count trips.
		a := e.do(http.MethodPut, "/blobs/"+blobOf(big), "alice", struct{ io.Reader }{bytes.NewReader(big)})
		wantAnswer(t, "over the cap, streamed", a, 413, syncerr.CodeBlobTooLarge)
		e.wantStored(blobOf(big), false)

		// A body cut short: 100 KiB of 300 KiB declared, then the
		// connection closes.
		conn := rawBlobPut(t, e.url, id, len(data), data[:100<<10])
		conn.Close()
		// A stalled body: the server gives up after StallTimeout.
		conn = rawBlobPut(t, e.url, id, len(data), data[:200<<10])
		resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
		conn.Close()
		if err != nil {
			t.Fatalf("stalled upload: no answer: %v", err)
		}
		if resp.StatusCode != 400 {
			t.Fatalf("stalled upload: HTTP %d, want 400", resp.StatusCode)
		}
		time.Sleep(100 * time.Millisecond) // the cut-short upload's handler finishes
		e.wantStored(id, false)
		if n, err := e.blobs.SweepUploads(context.Background(), 1<<62); err != nil || n != 0 {
			t.Fatalf("hostile uploads left %d staged pieces behind (%v)", n, err)
		}
		// A mismatching upload of a stored blob is refused too, and leaves
		// it as it was.
		wantAnswer(t, "upload", e.put("alice", data, id), 200, "")
		wantAnswer(t, "mismatching bytes for a stored blob", e.put("alice", bad, id), 400, syncerr.CodeBlobHashMismatch)
		if _, rc, err := e.blobs.OpenBlob(context.Background(), e2ePartition, id); err != nil {
			t.Fatal(err)
		} else {
			got, _ := io.ReadAll(rc)
			rc.Close()
			if !bytes.Equal(got, data) {
				t.Fatal("a refused upload changed the stored bytes")
			}
		}
	})
}

// rawBlobPut opens a connection and sends a PUT of a blob declaring n
// bytes, with only part of the body.
func rawBlobPut(t *testing.T, base, id string, n int, part []byte) net.Conn {
	t.Helper()
	conn, err := net.Dial("tcp", strings.TrimPrefix(base, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	fmt.Fprintf(conn, "PUT /blobs/%s HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer alice\r\nContent-Length: %d\r\n\r\n", id, n)
	if _, err := conn.Write(part); err != nil {
		t.Fatal(err)
	}
	return conn
}

// Unreferenced blobs are swept after the grace period; referenced ones,
// recent ones and re-uploaded ones stay.
func TestE2EBlobSweep(t *testing.T) {
	forEachBlobKind(t, func(t *testing.T, k blobKind) {
		e := newBlobEnv(t, k, func(c *syncgo.Config) { c.Limits.BlobGracePeriod = time.Hour })
		ctx := context.Background()
		// Bytes of this kind alone: blob ids are content hashes, and on
		// Postgres a blob's lock is database-wide (pgstore/blobs.go), so
		// the same bytes pushed by the other Postgres kind, running in
		// parallel on its own schema, could make this sweep skip a blob.
		kept, orphan, late, again := []byte("kept "+k.name), []byte("orphan "+k.name), []byte("late "+k.name), []byte("again "+k.name)
		for _, b := range [][]byte{kept, orphan, again} {
			wantAnswer(t, "upload", e.put("alice", b, blobOf(b)), 200, "")
		}
		if o := e.attach(e.client("alice", sspclient.Options{}), "a1", "p1", ptr(blobRef(blobOf(kept), len(kept)))); o.Status != wire.PushApplied {
			t.Fatal(statusOf(o))
		}
		e.clock.advance(50 * time.Minute)
		wantAnswer(t, "upload", e.put("alice", late, blobOf(late)), 200, "")
		wantAnswer(t, "upload again", e.put("alice", again, blobOf(again)), 200, "")
		e.clock.advance(20 * time.Minute)
		sw, err := e.srv.SweepBlobs(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if sw.Blobs != 1 || sw.Bytes != int64(len(orphan)) {
			t.Fatalf("sweep = %+v; want the orphan only", sw)
		}
		e.wantStored(blobOf(orphan), false)
		for _, b := range [][]byte{kept, late, again} {
			e.wantStored(blobOf(b), true)
		}
		// Once unreferenced and past the grace period, kept goes too.
		root := e.client("root", sspclient.Options{})
		if _, err := root.Delete("attachments", "a1"); err != nil {
			t.Fatal(err)
		}
		syncQuiet(t, root)
		e.clock.advance(2 * time.Hour)
		if sw, err := e.srv.SweepBlobs(ctx); err != nil || sw.Blobs != 3 {
			t.Fatalf("sweep after the delete = %+v, %v; want 3", sw, err)
		}
	})
}

// Presigned blob transfers on the server's own origin: the download URL
// serves the bytes without credentials; an edited, expired, foreign-key
// or other-blob token is blob.forbidden; an upload grant is a PUT URL for
// exactly the granted size.
func TestE2EBlobPresign(t *testing.T) {
	forEachBlobKind(t, func(t *testing.T, k blobKind) {
		e := newBlobEnv(t, k, func(c *syncgo.Config) { c.BlobPresign = true })
		data := []byte("presigned bytes")
		id := blobOf(data)
		wantAnswer(t, "upload", e.put("alice", data, id), 200, "")
		if o := e.attach(e.client("alice", sspclient.Options{}), "a1", "p1", ptr(blobRef(id, len(data)))); o.Status != wire.PushApplied {
			t.Fatal(statusOf(o))
		}
		a := e.get("alice", id)
		var dl struct {
			URL            string `json:"url"`
			URLExpiresAtMs int64  `json:"urlExpiresAtMs"`
		}
		if a.status != 200 || json.Unmarshal(a.body, &dl) != nil || !strings.HasPrefix(dl.URL, e.url+"/blobs/"+id+"?st=") {
			t.Fatalf("presigned download: %d %s", a.status, a.body)
		}
		if got := e.do(http.MethodGet, dl.URL, "", nil); got.status != 200 || !bytes.Equal(got.body, data) {
			t.Fatalf("GET of the URL: %d %q", got.status, got.body)
		}
		wantAnswer(t, "another scope gets no URL", func() httpAnswer {
			e.allow("mallory", map[string][]string{"project_id": {"p2"}})
			return e.get("mallory", id)
		}(), 403, syncerr.CodeBlobForbidden)
		u, tok, _ := strings.Cut(dl.URL, "?st=")
		edited := []byte(tok)
		edited[5] ^= 1
		sign := func(c urlsign.Claims, key []byte) string {
			s, err := urlsign.Keys{Current: key}.Sign(c)
			if err != nil {
				t.Fatal(err)
			}
			return s
		}
		aud := urlsign.SealPartition(signKeyA, e2ePartition)
		exp := e.clock.now()/1000 + 600
		other := []byte("other")
		wantAnswer(t, "upload other", e.put("alice", other, blobOf(other)), 200, "")
		for _, c := range []struct{ what, url string }{
			{"an edited token", u + "?st=" + string(edited)},
			{"a token of another key", u + "?st=" + sign(urlsign.Claims{Blob: id, Aud: aud, Exp: exp}, signKeyB)},
			{"a token of another blob", e.url + "/blobs/" + blobOf(other) + "?st=" + tok},
			{"a segment token", u + "?st=" + sign(urlsign.Claims{Seg: id, SD: "d", Aud: aud, Exp: exp}, signKeyA)},
			{"an upload grant used to download", u + "?st=" + sign(urlsign.Claims{Put: id, Len: new(int64), Aud: aud, Exp: exp}, signKeyA)},
			{"an audience that is no partition", u + "?st=" + sign(urlsign.Claims{Blob: id, Aud: "bogus", Exp: exp}, signKeyA)},
		} {
			wantAnswer(t, c.what, e.do(http.MethodGet, c.url, "", nil), 403, syncerr.CodeBlobForbidden)
		}
		wantAnswer(t, "a token for another partition's blob", e.do(http.MethodGet,
			u+"?st="+sign(urlsign.Claims{Blob: id, Aud: urlsign.SealPartition(signKeyA, "tenant-2"), Exp: exp}, signKeyA), "", nil),
			404, syncerr.CodeBlobNotFound)
		e.clock.advance(17 * time.Minute)
		wantAnswer(t, "an expired URL", e.do(http.MethodGet, dl.URL, "", nil), 403, syncerr.CodeBlobForbidden)

		// Upload grants.
		up := []byte("granted upload")
		upID := blobOf(up)
		grant := func(n int) (string, httpAnswer) {
			a := e.do(http.MethodPost, "/blobs/"+upID+"/upload-grant", "alice", strings.NewReader(fmt.Sprintf(`{"byteLength":%d}`, n)))
			var g struct{ URL string }
			_ = json.Unmarshal(a.body, &g)
			return g.URL, a
		}
		short, _ := grant(len(up) - 1)
		wantAnswer(t, "a PUT longer than granted", e.do(http.MethodPut, short, "", bytes.NewReader(up)), 413, syncerr.CodeBlobTooLarge)
		e.wantStored(upID, false)
		gu, _ := grant(len(up))
		wantAnswer(t, "a PUT of other bytes", e.do(http.MethodPut, gu, "", bytes.NewReader(bytes.ToUpper(up))), 400, syncerr.CodeBlobHashMismatch)
		otherURL := strings.Replace(gu, upID, blobOf(other), 1)
		wantAnswer(t, "a grant moved to another blob", e.do(http.MethodPut, otherURL, "", bytes.NewReader(other)), 403, syncerr.CodeBlobForbidden)
		wantAnswer(t, "a download URL used to upload", e.do(http.MethodPut, dl.URL, "", bytes.NewReader(data)), 403, syncerr.CodeBlobForbidden)
		wantAnswer(t, "the granted PUT", e.do(http.MethodPut, gu, "", bytes.NewReader(up)), 200, "")
		e.wantStored(upID, true)
		if _, a := grant(len(up)); !strings.Contains(string(a.body), `"present":true`) {
			t.Fatalf("grant of a stored blob: %s", a.body)
		}
		_, a = grant(-1)
		wantAnswer(t, "a negative byteLength", a, 400, syncerr.CodeInvalidRequest)
		_, a = grant(1 << 40)
		wantAnswer(t, "a byteLength over the cap", a, 413, syncerr.CodeBlobTooLarge)
	})
}

// A blob uploaded through one process of a fleet downloads through
// another, and a push through a third checks its existence there.
func TestE2EFleetBlobs(t *testing.T) {
	forEachFleetDB(t, func(t *testing.T, open func(t *testing.T) store.Store) {
		e := &e2eEnv{t: t, schema: blobSchema(t), allowed: map[string]map[string][]string{}}
		a := startNode(t, e, open(t))
		b := startNode(t, e, open(t))
		be := &blobEnv{e2eEnv: e, clock: newClock()}
		data := bytes.Repeat([]byte("fleet "), 100000)
		id := blobOf(data)
		e.url = a.http.URL
		wantAnswer(t, "upload through A", be.put("alice", data, id), 200, "")
		e.url = b.http.URL
		c := e.client("alice", sspclient.Options{})
		if o := be.attach(c, "a1", "p1", ptr(blobRef(id, len(data)))); o.Status != wire.PushApplied {
			t.Fatalf("push through B referencing a blob uploaded through A: %s", statusOf(o))
		}
		if got := be.get("alice", id); got.status != 200 || !bytes.Equal(got.body, data) {
			t.Fatalf("download through B: %d, %d bytes", got.status, len(got.body))
		}
	})
}

// The blob existence check runs with the scope check, before the row
// validator (§6.6, §6.7's order decode → scope authorization →
// validation → write): a row that references a blob never uploaded is
// blob.not_found, on insert and on update, and the validator never sees
// it; once the blob is stored, the validator decides.
func TestE2EBlobCheckBeforeValidator(t *testing.T) {
	forEachBlobKind(t, func(t *testing.T, k blobKind) {
		var calls atomic.Int32
		e := newBlobEnv(t, k, func(cfg *syncgo.Config) {
			cfg.Validators = map[string]validate.Validator{"attachments": func(_ context.Context, w *validate.Write) error {
				calls.Add(1)
				if w.Row["file"] != nil {
					return validate.Reject("app.no_files", "this app takes no files", nil)
				}
				return nil
			}}
		})
		e.allow("alice", map[string][]string{"project_id": {"p1"}})
		alice := e.client("alice", sspclient.Options{})
		syncQuiet(t, alice)
		data := []byte("not uploaded yet")
		id := blobOf(data)
		if o := e.attach(alice, "new", "p1", ptr(blobRef(id, len(data)))); o.Status != wire.PushRejected || o.ErrorCode() != syncerr.CodeBlobNotFound {
			t.Fatalf("insert referencing a missing blob: %s; want rejected blob.not_found", statusOf(o))
		}
		if n := calls.Load(); n != 0 {
			t.Fatalf("the validator ran %d times on a row referencing a missing blob", n)
		}
		if o := e.attach(alice, "a1", "p1", nil); o.Status != wire.PushApplied {
			t.Fatalf("insert without a file: %s", statusOf(o))
		}
		if o := e.attach(alice, "a1", "p1", ptr(blobRef(id, len(data)))); o.Status != wire.PushRejected || o.ErrorCode() != syncerr.CodeBlobNotFound {
			t.Fatalf("update referencing a missing blob: %s; want rejected blob.not_found", statusOf(o))
		}
		if n := calls.Load(); n != 1 {
			t.Fatalf("the validator ran %d times; want once, for the row without a file", n)
		}
		wantAnswer(t, "upload", e.put("alice", data, id), 200, "")
		if o := e.attach(alice, "a1", "p1", ptr(blobRef(id, len(data)))); o.Status != wire.PushRejected || o.ErrorCode() != "app.no_files" {
			t.Fatalf("update referencing a stored blob: %s; want the validator's app.no_files", statusOf(o))
		}
		if n := calls.Load(); n != 2 {
			t.Fatalf("the validator ran %d times; want twice", n)
		}
	})
}

// hookedBlobs runs a hook once, before the first DeleteBlob.
type hookedBlobs struct {
	store.BlobStore
	once     sync.Once
	onDelete func()
}

func (h *hookedBlobs) DeleteBlob(ctx context.Context, partition, blobID string, createdBeforeMs int64) (bool, error) {
	h.once.Do(h.onDelete)
	return h.BlobStore.DeleteBlob(ctx, partition, blobID, createdBeforeMs)
}

// A push that references a blob while the sweep deletes it never leaves
// a row pointing at deleted bytes (§5.9.2: the sweep never deletes a
// referenced blob): either the push commits first and the blob stays, or
// it finds the blob gone (blob.not_found) and its client uploads again.
// The push starts right before the delete, in the window between the
// sweep's reading of the reference index and its delete, where it used
// to be applied and its blob deleted after it. The clock goes back two
// hours for the push (a server of the fleet whose clock is behind the
// sweeping one's), so that the push may reference the blob as one
// uploaded lately.
func TestE2EBlobSweepRacesPush(t *testing.T) {
	for _, k := range blobKinds {
		t.Run(k.name, func(t *testing.T) {
			hb := &hookedBlobs{}
			e := newBlobEnv(t, k, func(c *syncgo.Config) {
				c.Limits.BlobGracePeriod = time.Hour
				hb.BlobStore, c.Blobs = c.Blobs, hb
			})
			e.allow("alice", map[string][]string{"project_id": {"p1"}})
			data := []byte("an attachment uploaded long ago")
			id := blobOf(data)
			wantAnswer(t, "upload", e.put("alice", data, id), 200, "")
			e.clock.advance(2 * time.Hour) // past the grace period, unreferenced
			alice := e.client("alice", sspclient.Options{})
			syncQuiet(t, alice)
			pushed := make(chan sspclient.Outcome, 1)
			hb.onDelete = func() {
				e.clock.advance(-2 * time.Hour)
				go func() { pushed <- e.attach(alice, "a1", "p1", ptr(blobRef(id, len(data)))) }()
				time.Sleep(200 * time.Millisecond) // the push runs as far as it can
			}
			if _, err := e.srv.SweepBlobs(context.Background()); err != nil {
				t.Fatal(err)
			}
			o := <-pushed
			switch a := e.get("alice", id); {
			case o.Status == wire.PushApplied && a.status != http.StatusOK:
				t.Fatalf("the push was applied, and its blob is gone: download HTTP %d %s", a.status, a.code)
			case o.Status != wire.PushApplied && o.ErrorCode() != syncerr.CodeBlobNotFound:
				t.Fatalf("push: %s; want applied, or rejected blob.not_found", statusOf(o))
			}
		})
	}
}

// Knowing a blob's id is not enough to read it (§5.9.5): an actor who may
// not read any row that references an old blob cannot reference it from
// a row of its own scope, which would make its download authorized; the
// push gets blob.not_found (a client holding the bytes uploads them again,
// which proves it holds them). An actor who may read a row that
// references the blob may reference it again, and so may one who
// uploaded it within the grace period.
func TestE2EBlobIDIsNotACapability(t *testing.T) {
	forEachBlobKind(t, func(t *testing.T, k blobKind) {
		e := newBlobEnv(t, k, func(c *syncgo.Config) { c.Limits.BlobGracePeriod = time.Hour })
		e.allow("owner", map[string][]string{"project_id": {"secret"}})
		e.allow("mate", map[string][]string{"project_id": {"secret", "p2"}})
		e.allow("mallory", map[string][]string{"project_id": {"p2"}})
		data := []byte("confidential payroll spreadsheet")
		id := blobOf(data)
		wantAnswer(t, "upload", e.put("owner", data, id), 200, "")
		if o := e.attach(e.client("owner", sspclient.Options{}), "s1", "secret", ptr(blobRef(id, len(data)))); o.Status != wire.PushApplied {
			t.Fatal(statusOf(o))
		}
		e.clock.advance(2 * time.Hour)
		// The owner edits its row: the reference it holds already is kept.
		owner := e.client("owner", sspclient.Options{})
		if o := e.attach(owner, "s1", "secret", ptr(blobRef(id, len(data)))); o.Status != wire.PushApplied {
			t.Fatalf("an update keeping its old reference: %s", statusOf(o))
		}

		mallory := e.client("mallory", sspclient.Options{})
		if o := e.attach(mallory, "m1", "p2", ptr(blobRef(id, len(data)))); o.Status != wire.PushRejected || o.ErrorCode() != syncerr.CodeBlobNotFound {
			t.Fatalf("mallory's reference to a blob she may not read: %s; want rejected blob.not_found", statusOf(o))
		}
		wantAnswer(t, "mallory's download", e.get("mallory", id), 403, syncerr.CodeBlobForbidden)

		// A scope-mate of the referencing row may copy the reference.
		if o := e.attach(e.client("mate", sspclient.Options{}), "c1", "p2", ptr(blobRef(id, len(data)))); o.Status != wire.PushApplied {
			t.Fatalf("a reference by an actor who may read the blob: %s", statusOf(o))
		}
		// An upload proves the bytes, also of a stored blob.
		wantAnswer(t, "mallory's upload of the same bytes", e.put("mallory", data, id), 200, "")
		if o := e.attach(mallory, "m2", "p2", ptr(blobRef(id, len(data)))); o.Status != wire.PushApplied {
			t.Fatalf("a reference after an upload: %s", statusOf(o))
		}
	})
}
