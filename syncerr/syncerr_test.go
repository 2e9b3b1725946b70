package syncerr

import (
	"bytes"
	"encoding/json"
	"testing"
)

// Every §10.1 body ParseJSON reads marshals back to one that reads the
// same code, message and details, with the catalog's fields for the code.
func FuzzParseJSON(f *testing.F) {
	f.Add([]byte(`{"code":"sync.not_found","message":"segment not found","category":"not-found","retryable":false,"recommendedAction":"forceResync"}`))
	f.Add([]byte(`{"code":"app.rule","message":"","details":{"reason":"x","fieldPaths":["a"]}}`))
	f.Add([]byte(`{"code":"sync.rate_limited","details":null}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		e, err := ParseJSON(b)
		if err != nil {
			return
		}
		out, err := json.Marshal(e)
		if err != nil {
			t.Fatalf("%s read as %+v does not marshal: %v", b, e, err)
		}
		back, err := ParseJSON(out)
		if err != nil || back.Code != e.Code || back.Message != e.Message {
			t.Fatalf("%s marshals as %s, read back as %+v, %v", b, out, back, err)
		}
		var want, got bytes.Buffer
		if len(e.Details) > 0 {
			_ = json.Compact(&want, e.Details)
		}
		if len(back.Details) > 0 {
			_ = json.Compact(&got, back.Details)
		}
		// encoding/json writes a RawMessage HTML-escaped ("&" as
		// \u0026): the same JSON value, so compare both escaped.
		var wantEsc, gotEsc bytes.Buffer
		json.HTMLEscape(&wantEsc, want.Bytes())
		json.HTMLEscape(&gotEsc, got.Bytes())
		if wantEsc.String() != gotEsc.String() {
			t.Fatalf("details %s came back as %s", e.Details, back.Details)
		}
		var shape body
		if err := json.Unmarshal(out, &shape); err != nil {
			t.Fatal(err)
		}
		if ent, ok := Lookup(e.Code); ok && (shape.Category != ent.Category || shape.Retryable != ent.Retryable || shape.RecommendedAction != ent.Action) {
			t.Fatalf("%s: marshalled %s, catalog %+v", e.Code, out, ent)
		}
	})
}
