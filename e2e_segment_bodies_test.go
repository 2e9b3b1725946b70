package syncgo_test

import (
	"bytes"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"io"
	"net/http"
	"testing"

	"github.com/klauspost/compress/zstd"

	"github.com/syncgo/syncgo/internal/sspclient"
	"github.com/syncgo/syncgo/store"
	"github.com/syncgo/syncgo/wire"
)

// Segments by reference are stored as their zstd download bodies on both
// drivers (sync_segment_bodies), and another process of the fleet, which
// reads them from the database, serves a zstd download with the stored
// body as it is and decodes it for gzip and identity, as the publishing
// process does from the body its hot segments keep: every download is
// the segment's bytes (its content address) once its coding is undone.
func TestE2ESegmentBodies(t *testing.T) {
	forEachFleetDB(t, func(t *testing.T, open func(t *testing.T) store.Store) {
		e, a, b, refs := fleetSegmentRefs(t, open, 30, "a title repeated, repeated, repeated, repeated")
		bs, ok := a.store.(store.SegmentStorer).SegmentStore().(store.SegmentBodyStore)
		if !ok {
			t.Fatal("the driver's segment store keeps no bodies")
		}
		scopes := string(wire.CanonicalScopeJSON(map[string][]string{"project_id": {"p1"}}))
		for _, ref := range refs {
			stored, err := bs.SegmentBody(context.Background(), ref.SegmentID)
			if err != nil {
				t.Fatal(err)
			}
			if stored.Encoding != store.SegmentBodyZstd || stored.ByteLength != ref.ByteLength || int64(len(stored.Bytes)) >= ref.ByteLength {
				t.Fatalf("segment %s stored as %q, %d bytes for %d (descriptor %d); want its smaller zstd body",
					ref.SegmentID, stored.Encoding, len(stored.Bytes), stored.ByteLength, ref.ByteLength)
			}
			for i, accept := range []string{"zstd", "gzip", "identity", "zstd", "gzip", "identity"} {
				// From B, which reads the body from the database, then
				// from A, whose hot segments keep the body it stored.
				url, from := b.http.URL, "B"
				if i >= 3 {
					url, from = a.http.URL, "A"
				}
				req, _ := http.NewRequest(http.MethodGet, url+"/segments/"+ref.SegmentID, nil)
				req.Header.Set("Authorization", "Bearer alice")
				req.Header.Set("X-Syncular-Scopes", scopes)
				req.Header.Set("Accept-Encoding", accept)
				resp, err := http.DefaultTransport.RoundTrip(req)
				if err != nil {
					t.Fatal(err)
				}
				raw, err := io.ReadAll(resp.Body)
				resp.Body.Close()
				if err != nil || resp.StatusCode != http.StatusOK {
					t.Fatalf("download from %s with %s: HTTP %d, %v: %s", from, accept, resp.StatusCode, err, raw)
				}
				got := raw
				switch ce := resp.Header.Get("Content-Encoding"); {
				case accept == "zstd" && ce == "zstd":
					if !bytes.Equal(raw, stored.Bytes) {
						t.Errorf("zstd download from %s is not the stored body (%d bytes, stored %d)", from, len(raw), len(stored.Bytes))
					}
					d, _ := zstd.NewReader(nil)
					got, err = d.DecodeAll(raw, nil)
					d.Close()
				case accept == "gzip" && ce == "gzip":
					var zr *gzip.Reader
					if zr, err = gzip.NewReader(bytes.NewReader(raw)); err == nil {
						got, err = io.ReadAll(zr)
					}
				case accept == "identity" && ce == "":
				default:
					t.Fatalf("download with Accept-Encoding %s answered Content-Encoding %q", accept, ce)
				}
				if err != nil {
					t.Fatalf("decode the %s download: %v", accept, err)
				}
				if sum := sha256.Sum256(got); "sha256:"+hex.EncodeToString(sum[:]) != ref.SegmentID || int64(len(got)) != ref.ByteLength {
					t.Fatalf("%s download from %s: %d bytes that are not segment %s", accept, from, len(got), ref.SegmentID)
				}
			}
		}
		// A client through B applies the pages A minted.
		cb, err := sspclient.New(b.http.URL, "bob", e.schema, sspclient.Options{Accept: wire.AcceptExternalRows, LimitSnapshotRows: 10})
		if err != nil {
			t.Fatal(err)
		}
		mustSubscribe(t, cb, "tasks-p1", "p1")
		syncQuiet(t, cb)
		sameRows(t, "client of B vs server", clientRows(t, cb, "tasks"), e.serverRows("tasks"))
	})
}
