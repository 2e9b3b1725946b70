package sspclient_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"

	"github.com/syncgo/syncgo/internal/sspclient"
	"github.com/syncgo/syncgo/wire"
)

// The client's decoders against any bytes, over real HTTP: a /sync answer
// the codec does not decode as a response is a failed round, never one
// that succeeds; a delta applies whole or not at all (an error applies
// nothing), and what ApplyDelta reports applied is the subscription's
// cursor, or nothing moved.
func FuzzClientDecoders(f *testing.F) {
	s := fakeSchema(f)
	encode := func(frames ...wire.Frame) []byte {
		b, err := (&wire.Message{Version: wire.Version3, Kind: wire.KindResponse, Frames: frames}).MarshalBinary()
		if err != nil {
			f.Fatal(err)
		}
		return b
	}
	effective := scopes("project", "p1")
	stored := wire.StoredScopes{{Key: "project", Value: "p1"}}
	f.Add(encode(&wire.RespHeader{LogEpoch: "e1"},
		&wire.SubStart{ID: "s", Status: wire.SubActive, EffectiveScopes: effective},
		&wire.Commit{CommitSeq: 6, Tables: []string{"notes"}, Changes: []wire.Change{
			{TableIndex: 0, RowID: "n2", Op: wire.OpUpsert, RowVersion: 2, Scopes: stored, Row: note(f, s, "n2", "p1", "b")},
			{TableIndex: 0, RowID: "n1", Op: wire.OpDelete, Scopes: stored}}},
		&wire.SubEnd{NextCursor: 6}))
	f.Add(encode(&wire.RespHeader{LogEpoch: "e1"},
		&wire.SubStart{ID: "s", Status: wire.SubActive, EffectiveScopes: effective},
		&wire.SegmentInline{Payload: segmentOf(f, s, note(f, s, "n3", "p1", "c"))},
		&wire.SubEnd{NextCursor: 9}))
	f.Add(encode(&wire.RespHeader{LogEpoch: "e1", ResetRequired: true}))
	f.Add(encode(&wire.RespHeader{LogEpoch: "e2"}, &wire.SubStart{ID: "s", Status: wire.SubActive, EffectiveScopes: effective},
		&wire.SubEnd{NextCursor: 8}))

	// pulled answers the epoch acquisition, then every round with
	// subscription s at cursor 5 holding row n1.
	n1 := note(f, s, "n1", "p1", "a")
	pulled := newFakeServer(f, func(req *wire.Request) []wire.Frame {
		if req.Header.LogEpoch == nil {
			return []wire.Frame{&wire.RespHeader{LogEpoch: "e1", ResetRequired: true}}
		}
		return []wire.Frame{&wire.RespHeader{LogEpoch: "e1"},
			&wire.SubStart{ID: "s", Status: wire.SubActive, EffectiveScopes: effective},
			&wire.Commit{CommitSeq: 5, Tables: []string{"notes"}, Changes: []wire.Change{
				{TableIndex: 0, RowID: "n1", Op: wire.OpUpsert, RowVersion: 1, Scopes: stored, Row: n1}}},
			&wire.SubEnd{NextCursor: 5}}
	})
	// raw answers /sync with the current input.
	var (
		mu   sync.Mutex
		body []byte
	)
	raw := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		b := body
		mu.Unlock()
		w.Header().Set("Content-Type", sspclient.ContentType)
		_, _ = w.Write(b)
	}))
	f.Cleanup(raw.Close)
	ctx := context.Background()

	f.Fuzz(func(t *testing.T, in []byte) {
		_, decodeErr := wire.DecodeMessage(in, wire.DecoderOptions{Kind: wire.KindResponse})

		mu.Lock()
		body = in
		mu.Unlock()
		c, err := sspclient.New(raw.URL, "tok", s, sspclient.Options{})
		if err != nil {
			t.Fatal(err)
		}
		if err := c.Subscribe("s", "notes", map[string][]string{"project": {"p1"}}); err != nil {
			t.Fatal(err)
		}
		if _, err := c.Sync(ctx); err == nil && decodeErr != nil {
			t.Fatalf("a round answered with bytes the codec refuses (%v) succeeded", decodeErr)
		}

		c, err = sspclient.New(pulled.srv.URL, "tok", s, sspclient.Options{})
		if err != nil {
			t.Fatal(err)
		}
		if err := c.Subscribe("s", "notes", map[string][]string{"project": {"p1"}}); err != nil {
			t.Fatal(err)
		}
		for range 2 {
			if _, err := c.Sync(ctx); err != nil {
				t.Fatal(err)
			}
		}
		before := c.Rows("notes")
		applied, err := c.ApplyDelta(in)
		st, _ := c.Subscription("s")
		switch {
		case err != nil && applied != -1:
			t.Fatalf("a delta that failed (%v) reported %d applied", err, applied)
		case applied == -1:
			if st.Cursor != 5 || len(c.Rows("notes")) != len(before) {
				t.Fatalf("nothing applied (%v), but the cursor is %d and %d rows are held", err, st.Cursor, len(c.Rows("notes")))
			}
		case applied <= 5 || st.Cursor != applied:
			t.Fatalf("applied %d (%v), cursor %d", applied, err, st.Cursor)
		}
	})
}
