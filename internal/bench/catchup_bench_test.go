package bench

import (
	"context"
	"testing"
	"time"
)

// BenchmarkCatchUp is one catch-up of 5,000 seeded commits (5 rounds of
// 1,000, from cursor 0) by the tool against an in-process server on
// SQLite: the tool's decode of every frame and the server's windows
// together, as syncgo bench -workload catchup -seeded runs them.
func BenchmarkCatchUp(b *testing.B) {
	hs, sc := newTestServer(b)
	ctx := context.Background()
	base := Config{URL: hs.URL, Schema: sc, Timeout: time.Minute, Scope: "bench-" + randomHex(4), Quiet: true}
	seed := base
	seed.Workload, seed.Commits = "catchup", 5000
	if _, err := Run(ctx, seed); err != nil {
		b.Fatal(err)
	}
	cu := base
	cu.Workload, cu.Seeded = "catchup", true
	b.ReportAllocs()
	for b.Loop() {
		res, err := Run(ctx, cu)
		if err != nil {
			b.Fatal(err)
		}
		if got, _ := res.Figure("commits caught up"); got != 5000 || res.Errors != 0 {
			b.Fatalf("caught up %v commits with %d errors, want 5000 and none", got, res.Errors)
		}
	}
}
