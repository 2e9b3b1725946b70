package realtime

import (
	"bytes"
	"fmt"
	"testing"

	"github.com/gobwas/ws"
)

// BenchmarkDeflateDelta is the cost a fan-out adds once per delta when
// sockets negotiated permessage-deflate: compressing the delta's payload.
func BenchmarkDeflateDelta(b *testing.B) {
	for _, size := range []int{300, 4 << 10, 64 << 10} {
		payload := bytes.Repeat([]byte(`{"id":"task-00017","project_id":"p1","title":"Task number 17"}`), size/32+1)[:size]
		b.Run(fmt.Sprintf("%dB", size), func(b *testing.B) {
			var z codec
			b.SetBytes(int64(size))
			b.ReportAllocs()
			var out int
			for b.Loop() {
				out = len(z.compress(ws.OpBinary, payload))
			}
			b.ReportMetric(float64(out), "wire-B")
		})
	}
}
