package engine

import (
	"fmt"
	"io"
	"testing"

	"github.com/syncgo/syncgo/schema"
	"github.com/syncgo/syncgo/store"
	"github.com/syncgo/syncgo/wire"
)

// BenchmarkEncodeCommitsWindow encodes a pull response of one window of
// commits (one upsert each, a ~200-byte row), with a fresh encoder each
// time as a request has: 10 and 30 commits are a reconnecting client's
// recovery pull, a few KiB; 1,000 a catch-up window. The bytes allocated
// per response are what a burst of such pulls costs.
//
//	go test -run '^$' -bench BenchmarkEncodeCommitsWindow ./internal/engine
func BenchmarkEncodeCommitsWindow(b *testing.B) {
	sc, err := schema.New(1).Table("tasks", "id", schema.String("id"), schema.String("project_id"), schema.String("title")).
		Scope("project:{project_id}").Compile()
	if err != nil {
		b.Fatal(err)
	}
	tbl, _ := sc.Table("tasks")
	for _, n := range []int{10, 30, 1000} {
		var win store.CommitWindow
		for i := range n {
			id := fmt.Sprintf("task-%06d", i)
			row, err := tbl.RowCodec().AppendRow(nil, []wire.Value{{Str: id}, {Str: "p1"},
				{Str: fmt.Sprintf("%0180d", i)}})
			if err != nil {
				b.Fatal(err)
			}
			win.Commits = append(win.Commits, store.Commit{Seq: int64(i + 1), ActorID: "actor-1", CreatedAtMs: 1782993600000,
				Changes: []store.Change{{RowID: id, Op: wire.OpUpsert, RowVersion: 1,
					Scopes: wire.StoredScopes{{Key: "project_id", Value: "p1"}}, Payload: row}}})
		}
		scopes := wire.ScopeMap{{Key: "project_id", Values: []string{"p1"}}}
		b.Run(fmt.Sprintf("commits=%d", n), func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				enc, _ := wire.NewEncoder(io.Discard, wire.KindResponse, wire.Version3)
				for _, f := range []wire.Frame{&wire.RespHeader{LogEpoch: "e1"},
					&wire.SubStart{ID: "s", Status: wire.SubActive, EffectiveScopes: scopes}} {
					if err := enc.Encode(f); err != nil {
						b.Fatal(err)
					}
				}
				if err := encodeCommits(enc, win, "tasks", tbl, tbl, false); err != nil {
					b.Fatal(err)
				}
				if err := enc.Encode(&wire.SubEnd{NextCursor: int64(n)}); err != nil || enc.Close() != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
