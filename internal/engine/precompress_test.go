package engine

import (
	"bytes"
	"testing"

	"github.com/syncgo/syncgo/schema"
	"github.com/syncgo/syncgo/store"
	"github.com/syncgo/syncgo/wire"
)

// A body compressed ahead is the whole response message as the request
// would encode it (its prefix up to SUB_START, the window, SUB_END and
// END), kept only when the transport compresses it and it is at most
// preBodyMaxBytes.
func TestPreBodyBuild(t *testing.T) {
	sc, err := schema.New(1).Table("tasks", "id", schema.String("id"), schema.String("project_id")).
		Scope("project:{project_id}").Compile()
	if err != nil {
		t.Fatal(err)
	}
	tbl, _ := sc.Table("tasks")
	scopes := wire.ScopeMap{{Key: "project_id", Values: []string{"p1"}}}
	var win store.CommitWindow
	for i := range 3 {
		row, err := tbl.RowCodec().AppendRow(nil, []wire.Value{{Str: "t"}, {Str: "p1"}})
		if err != nil {
			t.Fatal(err)
		}
		win.Commits = append(win.Commits, store.Commit{Seq: int64(11 + i), ActorID: "a",
			Changes: []store.Change{{RowID: "t", Op: wire.OpUpsert, RowVersion: 1, Scopes: wire.StoredScopes{{Key: "project_id", Value: "p1"}}, Payload: row}}})
	}
	q := store.CommitWindowQuery{Table: "tasks", Scopes: scopes, AfterSeq: 10, ThroughSeq: 100, LimitChanges: 3}

	// The message the request would write for the window.
	var want bytes.Buffer
	enc, _ := wire.NewEncoder(&want, wire.KindResponse, wire.Version3)
	served := int32(1)
	for _, f := range []wire.Frame{&wire.RespHeader{LatestSchemaVersion: &served, LogEpoch: "e1"},
		&wire.SubStart{ID: "s", Status: wire.SubActive, EffectiveScopes: scopes}} {
		if err := enc.Encode(f); err != nil {
			t.Fatal(err)
		}
	}
	if err := encodeCommits(enc, win, "tasks", tbl, tbl, false); err != nil {
		t.Fatal(err)
	}
	if err := enc.Encode(&wire.SubEnd{NextCursor: 13}); err != nil || enc.Close() != nil {
		t.Fatal(err)
	}

	var got []byte
	spec := &preSpec{encoding: "zstd", version: wire.Version3, cs: sc, current: sc, subID: "s", served: 1, logEpoch: "e1",
		compress: func(enc string, raw []byte) ([]byte, bool) { got = bytes.Clone(raw); return []byte("coded"), true }}
	b := spec.build(win, q, new(bytes.Buffer))
	if b == nil || !bytes.Equal(got, want.Bytes()) || string(b.body) != "coded" || b.next != 13 {
		t.Fatalf("body %+v of message %x; want the message %x, next 13", b, got, want.Bytes())
	}
	if whole := append(append([]byte{}, b.prefix...), b.suffix...); !bytes.HasPrefix(want.Bytes(), b.prefix) ||
		!bytes.HasSuffix(want.Bytes(), b.suffix) || len(whole) >= want.Len() {
		t.Fatalf("prefix %x and suffix %x do not frame the message %x", b.prefix, b.suffix, want.Bytes())
	}

	spec.compress = func(string, []byte) ([]byte, bool) { return nil, false }
	if b := spec.build(win, q, new(bytes.Buffer)); b != nil {
		t.Fatal("a body the transport would not compress was kept")
	}
	for _, n := range []int{preBodyMaxBytes, preBodyMaxBytes + 1} {
		spec.compress = func(string, []byte) ([]byte, bool) { return make([]byte, n), true }
		if b := spec.build(win, q, new(bytes.Buffer)); (b != nil) != (n <= preBodyMaxBytes) {
			t.Fatalf("a body of %d bytes kept = %v", n, b != nil)
		}
	}
}
