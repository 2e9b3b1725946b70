package syncgo_test

import (
	"bytes"
	"compress/gzip"
	"context"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"testing"

	"github.com/klauspost/compress/zstd"

	"github.com/syncgo/syncgo/internal/sspclient"
	"github.com/syncgo/syncgo/wire"
)

// Response encodings (§1.3): the same pull answered with Accept-Encoding
// identity, gzip and zstd carries the matching Content-Encoding and
// decodes to the same bytes, hence the same message; segment downloads
// likewise; and clients that ask for each encoding end with the same rows.
func TestE2EResponseEncodings(t *testing.T) {
	forEachDriver(t, func(t *testing.T, d e2eDriver) {
		e, epoch := compressibleEnv(t, d)
		pull := encodeRequest(t, &wire.Request{Version: 3,
			Header: &wire.ReqHeader{ClientID: "enc-device", SchemaVersion: 1, LogEpoch: &epoch},
			Pull:   &wire.PullHeader{Accept: wire.AcceptInlineRows | wire.AcceptExternalRows},
			Subscriptions: []*wire.Subscription{{ID: "s", Table: "tasks",
				Scopes: wire.ScopeMap{{Key: "project_id", Values: []string{"p1"}}}, Cursor: -1}}})

		var identity []byte
		for _, enc := range []string{"identity", "gzip", "zstd"} {
			r := e.post(t, body(pull), map[string]string{"Accept-Encoding": enc})
			if got := r.header.Get("Content-Encoding"); got != contentEncoding(enc) {
				t.Fatalf("Accept-Encoding %s answered Content-Encoding %q", enc, got)
			}
			plain := decompress(t, enc, r.body)
			if enc == "identity" {
				identity = plain
				if m := decodeResponse(t, r); len(m.Frames) < 4 {
					t.Fatalf("the pull answered %d frames, want a bootstrap section", len(m.Frames))
				}
				continue
			}
			if len(r.body) >= len(plain) {
				t.Fatalf("%s: %d encoded bytes for %d plain bytes", enc, len(r.body), len(plain))
			}
			if !bytes.Equal(plain, identity) {
				a, _ := wire.DecodeMessage(identity, wire.DecoderOptions{})
				b, _ := wire.DecodeMessage(plain, wire.DecoderOptions{})
				ra, _ := wire.RenderMessage(a)
				rb, _ := wire.RenderMessage(b)
				t.Fatalf("%s decodes to another message:\nidentity %s\n%s %s", enc, ra, enc, rb)
			}
		}

		// q-values (RFC 9110 §12.4.2): zero in any spelling refuses a coding.
		for accept, want := range map[string]string{
			"zstd;q=0.0, gzip;q=0.5": "gzip",
			"zstd;q=0.000, gzip":     "gzip",
			"zstd; Q=0, gzip;q=0":    "",
			"zstd;q=0.001":           "zstd",
			"gzip;q=1.0":             "gzip",
		} {
			r := e.post(t, body(pull), map[string]string{"Accept-Encoding": accept})
			if got := r.header.Get("Content-Encoding"); got != want {
				t.Fatalf("Accept-Encoding %q answered Content-Encoding %q, want %q", accept, got, want)
			}
			if !bytes.Equal(decompress(t, map[string]string{"": "identity"}[want]+want, r.body), identity) {
				t.Fatalf("Accept-Encoding %q: the body differs from identity", accept)
			}
		}

		var rows []map[string]string
		var segs [][]byte
		for _, enc := range []string{"identity", "gzip", "zstd"} {
			c := e.client("alice", sspclient.Options{AcceptEncoding: enc, Accept: wire.AcceptExternalRows, LimitSnapshotRows: 25})
			mustSubscribe(t, c, "tasks-p1", "p1")
			var refs []wire.SegmentRef
			for _, res := range syncQuiet(t, c) {
				// A small response goes out as it is (TestE2ESmallResponses).
				if res.ContentEncoding != contentEncoding(enc) && res.ContentEncoding != "" {
					t.Fatalf("client asking %s got Content-Encoding %q", enc, res.ContentEncoding)
				}
				for _, s := range res.Sections {
					refs = append(refs, s.Refs...)
				}
			}
			if len(refs) == 0 {
				t.Fatalf("%s: no segment was served by reference", enc)
			}
			b, err := c.DownloadSegment(context.Background(), refs[0].SegmentID, map[string][]string{"project_id": {"p1"}})
			if err != nil {
				t.Fatalf("%s segment download: %v", enc, err)
			}
			segs = append(segs, b)
			rows = append(rows, clientRows(t, c, "tasks"))
		}
		for i := 1; i < len(rows); i++ {
			sameRows(t, "clients of different encodings", rows[i], rows[0])
			if !bytes.Equal(segs[i], segs[0]) {
				t.Fatal("the same segment downloaded with another encoding differs")
			}
		}
		sameRows(t, "clients vs server", rows[0], e.serverRows("tasks"))
	})
}

// contentEncoding is the Content-Encoding that answers an Accept-Encoding
// of one coding.
// Small responses (§1.3 leaves identity acceptable): a /sync response of
// at most 1,400 bytes goes out without a Content-Encoding whatever the
// client accepts, with its length; a larger one is compressed. Pulls of 1
// to 8 rows cross the line: every response at most 1,400 bytes long is
// identity, every longer one is encoded, and both kinds occur. A client
// that refuses identity gets even a small response encoded.
func TestE2ESmallResponses(t *testing.T) {
	forEachDriver(t, func(t *testing.T, d e2eDriver) {
		e, epoch := compressibleEnv(t, d)
		pull := func(rows int32) []byte {
			return encodeRequest(t, &wire.Request{Version: 3,
				Header: &wire.ReqHeader{ClientID: "small-device", SchemaVersion: 1, LogEpoch: &epoch},
				Pull:   &wire.PullHeader{Accept: wire.AcceptInlineRows, LimitSnapshotRows: rows},
				Subscriptions: []*wire.Subscription{{ID: "s", Table: "tasks",
					Scopes: wire.ScopeMap{{Key: "project_id", Values: []string{"p1"}}}, Cursor: -1}}})
		}
		small, large := 0, 0
		for _, enc := range []string{"zstd", "gzip"} {
			for rows := int32(1); rows <= 8; rows++ {
				r := e.post(t, body(pull(rows)), map[string]string{"Accept-Encoding": enc + ", gzip"})
				got := r.header.Get("Content-Encoding")
				plain := decompress(t, map[string]string{"": "identity"}[got]+got, r.body)
				if m := decodeResponse(t, rawResponse{status: r.status, header: http.Header{}, body: plain}); len(m.Frames) < 3 {
					t.Fatalf("%d rows: %d frames", rows, len(m.Frames))
				}
				switch {
				case len(plain) <= 1400 && got != "":
					t.Fatalf("%d rows, %d bytes: Content-Encoding %q, want none", rows, len(plain), got)
				case len(plain) > 1400 && got != enc:
					t.Fatalf("%d rows, %d bytes: Content-Encoding %q, want %s", rows, len(plain), got, enc)
				case got == "":
					small++
					if cl := r.header.Get("Content-Length"); cl != strconv.Itoa(len(r.body)) {
						t.Fatalf("%d rows: Content-Length %q for %d bytes", rows, cl, len(r.body))
					}
				default:
					large++
				}
			}
		}
		if small == 0 || large == 0 {
			t.Fatalf("%d small and %d large responses: the pulls do not cross the line", small, large)
		}
		for accept, want := range map[string]string{
			"zstd, identity;q=0":    "zstd",
			"gzip, *;q=0":           "gzip",
			"gzip, *;q=0, identity": "",
		} {
			r := e.post(t, body(pull(1)), map[string]string{"Accept-Encoding": accept})
			if got := r.header.Get("Content-Encoding"); got != want {
				t.Fatalf("Accept-Encoding %q, a small response: Content-Encoding %q, want %q", accept, got, want)
			}
			decompress(t, map[string]string{"": "identity"}[want]+want, r.body)
		}
	})
}

// compressibleEnv is a server holding 40 tasks of project p1 with
// compressible titles, and its log epoch.
func compressibleEnv(t *testing.T, d e2eDriver) (*e2eEnv, string) {
	t.Helper()
	e := newE2EEnv(t, d)
	w := e.client("writer", sspclient.Options{})
	for i := range 40 {
		mustUpsert(t, w, taskRow(fmt.Sprintf("t%02d", i), "p1", fmt.Sprintf("a task with a compressible title %d", i)))
	}
	syncQuiet(t, w)
	return e, e.partitionState().LogEpoch
}

func contentEncoding(accept string) string {
	if accept == "identity" {
		return ""
	}
	return accept
}

// decompress decodes a body by its encoding.
func decompress(t *testing.T, enc string, b []byte) []byte {
	t.Helper()
	var r io.Reader = bytes.NewReader(b)
	switch enc {
	case "gzip":
		zr, err := gzip.NewReader(r)
		if err != nil {
			t.Fatal(err)
		}
		r = zr
	case "zstd":
		zr, err := zstd.NewReader(r)
		if err != nil {
			t.Fatal(err)
		}
		defer zr.Close()
		r = zr
	}
	out, err := io.ReadAll(r)
	if err != nil {
		t.Fatalf("%s body: %v", enc, err)
	}
	return out
}
