package storetest

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/klauspost/compress/zstd"

	"github.com/syncgo/syncgo/store"
	"github.com/syncgo/syncgo/wire"
)

// pageLike returns about n bytes shaped like a rows page of a bootstrap
// (10,000 short rows of a task table, compressible as such a page is).
func pageLike(n int) []byte {
	var b strings.Builder
	for i := 0; b.Len() < n; i++ {
		fmt.Fprintf(&b, "\x01\x0btask-%06d\x02\x19a task title number %d\x03%d\x04\x00", i, i*7919%100000, i%97)
	}
	return []byte(b.String()[:n])
}

// BenchmarkPublishSegment is the segment store write of one bootstrap
// page (627 KB, the size of a 10,000-row page of the 100,000-row
// bootstrap) as its bytes and, on a store that keeps them
// (store.SegmentBodyStore), as its zstd body; a fresh segment each
// iteration.
func BenchmarkPublishSegment(b *testing.B, open Opener) {
	page := pageLike(627_000)
	enc, err := zstd.NewWriter(nil, zstd.WithEncoderLevel(zstd.SpeedFastest))
	if err != nil {
		b.Fatal(err)
	}
	body := enc.EncodeAll(page, nil)
	enc.Close()
	for _, mode := range []string{"bytes", "body"} {
		b.Run(mode, func(b *testing.B) {
			ss, ok := open(b).(store.SegmentStorer)
			if !ok {
				b.Skip("the driver has no segment store")
			}
			seg := ss.SegmentStore()
			bs, bodies := seg.(store.SegmentBodyStore)
			if mode == "body" && !bodies {
				b.Skip("the store keeps no bodies")
			}
			ctx := context.Background()
			b.SetBytes(int64(len(page)))
			b.ResetTimer()
			for i := range b.N {
				id := fmt.Sprintf("sha256:%s-%d", mode, i)
				pub := store.SegmentPublication{Partition: "p", LogEpoch: "e", Table: "tasks", SchemaVersion: 1,
					MediaType: wire.MediaRows, ScopeDigest: "d", AsOfCommitSeq: 1, RowCount: 10_000,
					CreatedAtMs: 1, ExpiresAtMs: 1 << 40}
				if mode == "body" {
					err = bs.PublishSegmentBody(ctx, id, int64(len(page)), store.SegmentBodyZstd, body, pub)
				} else {
					err = seg.PublishSegment(ctx, id, page, pub)
				}
				if err != nil {
					b.Fatal(err)
				}
			}
			if mode == "body" {
				b.ReportMetric(float64(len(body)), "body-bytes")
			}
		})
	}
}
