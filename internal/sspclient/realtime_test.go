package sspclient_test

import (
	"context"
	"maps"
	"testing"

	"github.com/syncgo/syncgo/internal/sspclient"
	"github.com/syncgo/syncgo/wire"
)

// A delta is applied whole or not at all: one whose later bytes do not
// decode (a row the codec refuses in its second section, or a message cut
// short after its first section) fails without applying its first
// section, so that the cursors and rows stay those of the last pull and
// the pull that follows the failure brings both sections.
func TestApplyDeltaAppliesNothingOfACorruptDelta(t *testing.T) {
	s := fakeSchema(t)
	p1, p2 := wire.StoredScopes{{Key: "project", Value: "p1"}}, wire.StoredScopes{{Key: "project", Value: "p2"}}
	srv := newFakeServer(t, func(req *wire.Request) []wire.Frame {
		if req.Header.LogEpoch == nil {
			return []wire.Frame{&wire.RespHeader{LogEpoch: "e1", ResetRequired: true}}
		}
		return []wire.Frame{&wire.RespHeader{LogEpoch: "e1"},
			&wire.SubStart{ID: "a", Status: wire.SubActive, EffectiveScopes: scopes("project", "p1")},
			&wire.Commit{CommitSeq: 5, Tables: []string{"notes"}, Changes: []wire.Change{
				{TableIndex: 0, RowID: "n1", Op: wire.OpUpsert, RowVersion: 1, Scopes: p1, Row: note(t, s, "n1", "p1", "a")}}},
			&wire.SubEnd{NextCursor: 5},
			&wire.SubStart{ID: "b", Status: wire.SubActive, EffectiveScopes: scopes("project", "p2")},
			&wire.SubEnd{NextCursor: 5}}
	})
	delta := func(second []byte) []byte {
		b, err := (&wire.Message{Version: wire.Version3, Kind: wire.KindResponse, Frames: []wire.Frame{
			&wire.RespHeader{LogEpoch: "e1"},
			&wire.SubStart{ID: "a", Status: wire.SubActive, EffectiveScopes: scopes("project", "p1")},
			&wire.Commit{CommitSeq: 6, Tables: []string{"notes"}, Changes: []wire.Change{
				{TableIndex: 0, RowID: "n1", Op: wire.OpUpsert, RowVersion: 2, Scopes: p1, Row: note(t, s, "n1", "p1", "edited")}}},
			&wire.SubEnd{NextCursor: 6},
			&wire.SubStart{ID: "b", Status: wire.SubActive, EffectiveScopes: scopes("project", "p2")},
			&wire.Commit{CommitSeq: 6, Tables: []string{"notes"}, Changes: []wire.Change{
				{TableIndex: 0, RowID: "n2", Op: wire.OpUpsert, RowVersion: 1, Scopes: p2, Row: second}}},
			&wire.SubEnd{NextCursor: 6}}}).MarshalBinary()
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	whole := delta(note(t, s, "n2", "p2", "new"))
	for name, payload := range map[string][]byte{
		"row the codec refuses": delta([]byte{0xff, 0xff, 0xff}),
		"cut short":             whole[:len(whole)-3],
	} {
		t.Run(name, func(t *testing.T) {
			c, err := sspclient.New(srv.srv.URL, "tok", s, sspclient.Options{})
			if err != nil {
				t.Fatal(err)
			}
			for _, id := range []string{"a", "b"} {
				if err := c.Subscribe(id, "notes", map[string][]string{"project": {map[string]string{"a": "p1", "b": "p2"}[id]}}); err != nil {
					t.Fatal(err)
				}
			}
			for range 2 { // the epoch, then the pull
				if _, err := c.Sync(context.Background()); err != nil {
					t.Fatal(err)
				}
			}
			before := maps.Clone(c.Rows("notes"))
			applied, err := c.ApplyDelta(payload)
			if err == nil {
				t.Fatalf("a corrupt delta applied without an error (applied %d)", applied)
			}
			st, _ := c.Subscription("a")
			if applied != -1 || st.Cursor != 5 || !maps.EqualFunc(c.Rows("notes"), before, func(x, y sspclient.Row) bool { return x.Version == y.Version }) {
				t.Fatalf("a delta whose second section does not decode (%v) reported %d applied, left subscription a at cursor %d and rows %v; want nothing applied: cursor 5, rows %v",
					err, applied, st.Cursor, c.Rows("notes"), before)
			}
		})
	}
	// The same delta decoded whole applies both sections.
	c, err := sspclient.New(srv.srv.URL, "tok", s, sspclient.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Subscribe("a", "notes", map[string][]string{"project": {"p1"}}); err != nil {
		t.Fatal(err)
	}
	if err := c.Subscribe("b", "notes", map[string][]string{"project": {"p2"}}); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if _, err := c.Sync(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	if applied, err := c.ApplyDelta(whole); err != nil || applied != 6 || len(c.Rows("notes")) != 2 || c.Rows("notes")["n1"].Version != 2 {
		t.Fatalf("the whole delta: applied %d, %v, rows %v; want 6 and rows n1 at version 2 and n2", applied, err, c.Rows("notes"))
	}
}
