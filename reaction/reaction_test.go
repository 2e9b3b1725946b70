package reaction

import (
	"bytes"
	"encoding/json"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/syncgo/syncgo/internal/jsonb"
	"github.com/syncgo/syncgo/store"
	"github.com/syncgo/syncgo/validate"
)

var origin = validate.Origin{ActorID: "a", Partition: "p", ClientID: "c", ClientCommitID: "cc"}

func known(name string) bool { return name == "mail" || name == "hook" }

func TestPrepareStoresWhatThePlannerPlanned(t *testing.T) {
	rs, err := Prepare([]Plan{
		{Key: "k1", Name: "mail", Payload: map[string]any{"z": 1, "a": []any{"<b>", 2.5}}},
		{Key: "k\"2", Name: "hook", Version: 7, Payload: json.RawMessage(` {"b": true, "a": null} `), MaxAttempts: 1},
		{Key: "k3", Name: "mail"},
	}, origin, 42, 1000, known)
	if err != nil {
		t.Fatal(err)
	}
	want := []store.NewReaction{
		{IdempotencyKey: `["p","c","cc","k1"]`, Type: "mail", Version: 1, Payload: []byte(`{"a":["<b>",2.5],"z":1}`),
			SourceClientID: "c", SourceClientCommitID: "cc", SourceCommitSeq: 42, CreatedAtMs: 1000, MaxAttempts: DefaultMaxAttempts},
		{IdempotencyKey: `["p","c","cc","k\"2"]`, Type: "hook", Version: 7, Payload: []byte(`{"a":null,"b":true}`),
			SourceClientID: "c", SourceClientCommitID: "cc", SourceCommitSeq: 42, CreatedAtMs: 1000, MaxAttempts: 1},
		{IdempotencyKey: `["p","c","cc","k3"]`, Type: "mail", Version: 1, Payload: []byte(`null`),
			SourceClientID: "c", SourceClientCommitID: "cc", SourceCommitSeq: 42, CreatedAtMs: 1000, MaxAttempts: DefaultMaxAttempts},
	}
	if len(rs) != len(want) {
		t.Fatalf("prepared %d", len(rs))
	}
	for i := range rs {
		if rs[i].IdempotencyKey != want[i].IdempotencyKey || rs[i].Type != want[i].Type || rs[i].Version != want[i].Version ||
			!bytes.Equal(rs[i].Payload, want[i].Payload) || rs[i].SourceCommitSeq != 42 || rs[i].CreatedAtMs != 1000 ||
			rs[i].MaxAttempts != want[i].MaxAttempts || rs[i].SourceClientID != "c" || rs[i].SourceClientCommitID != "cc" {
			t.Errorf("reaction %d = %+v (payload %s); want %+v (payload %s)", i, rs[i], rs[i].Payload, want[i], want[i].Payload)
		}
	}
	if rs, err := Prepare(nil, origin, 1, 1, known); err != nil || len(rs) != 0 {
		t.Errorf("Prepare(nil) = %v, %v", rs, err)
	}
}

func TestPrepareRefusesOutOfBounds(t *testing.T) {
	deep := strings.Repeat("[", MaxPayloadDepth+1) + "1" + strings.Repeat("]", MaxPayloadDepth+1)
	deepOK := strings.Repeat("[", MaxPayloadDepth) + "1" + strings.Repeat("]", MaxPayloadDepth)
	big := map[string]any{"s": strings.Repeat("x", MaxPayloadBytes)}
	many := make([]Plan, MaxPerCommit+1)
	for i := range many {
		many[i] = Plan{Key: strings.Repeat("k", i+1), Name: "mail"}
	}
	for _, tc := range []struct {
		name  string
		plans []Plan
	}{
		{"too many", many},
		{"unknown handler", []Plan{{Key: "k", Name: "sms"}}},
		{"not code-like", []Plan{{Key: "k", Name: "1mail"}}},
		{"space in name", []Plan{{Key: "k", Name: "ma il"}}},
		{"long name", []Plan{{Key: "k", Name: "m" + strings.Repeat("a", MaxNameBytes)}}},
		{"empty key", []Plan{{Key: "", Name: "mail"}}},
		{"long key", []Plan{{Key: strings.Repeat("k", MaxKeyBytes+1), Name: "mail"}}},
		{"invalid UTF-8 key", []Plan{{Key: "\xff", Name: "mail"}}},
		{"duplicate key", []Plan{{Key: "k", Name: "mail"}, {Key: "k", Name: "hook"}}},
		{"negative version", []Plan{{Key: "k", Name: "mail", Version: -1}}},
		{"zero attempts allowed, 101 not", []Plan{{Key: "k", Name: "mail", MaxAttempts: MaxAttempts + 1}}},
		{"negative attempts", []Plan{{Key: "k", Name: "mail", MaxAttempts: -1}}},
		{"unmarshalable payload", []Plan{{Key: "k", Name: "mail", Payload: func() {}}}},
		{"NaN payload", []Plan{{Key: "k", Name: "mail", Payload: math.NaN()}}},
		{"infinite number", []Plan{{Key: "k", Name: "mail", Payload: json.RawMessage(`[1e400]`)}}},
		{"too deep", []Plan{{Key: "k", Name: "mail", Payload: json.RawMessage(deep)}}},
		{"too big", []Plan{{Key: "k", Name: "mail", Payload: big}}},
		{"invalid raw JSON", []Plan{{Key: "k", Name: "mail", Payload: json.RawMessage(`{"a":`)}}},
		{"trailing raw JSON", []Plan{{Key: "k", Name: "mail", Payload: json.RawMessage(`{} {}`)}}},
		{"U+0000 in a string", []Plan{{Key: "k", Name: "mail", Payload: map[string]any{"s": "a\x00b"}}}},
		{"U+0000 escaped", []Plan{{Key: "k", Name: "mail", Payload: json.RawMessage(`["\u0000"]`)}}},
		{"U+0000 in a key", []Plan{{Key: "k", Name: "mail", Payload: json.RawMessage(`{"\u0000":1}`)}}},
		{"scale past numeric's", []Plan{{Key: "k", Name: "mail", Payload: json.RawMessage(`{"n":1e-999999}`)}}},
	} {
		if rs, err := Prepare(tc.plans, origin, 1, 1, known); err == nil {
			t.Errorf("%s: prepared %d reactions; want an error", tc.name, len(rs))
		}
	}
	if _, err := Prepare([]Plan{{Key: "k", Name: "mail", Payload: json.RawMessage(deepOK)}}, origin, 1, 1, known); err != nil {
		t.Errorf("a payload %d levels deep: %v", MaxPayloadDepth, err)
	}
	if _, err := Prepare(many[:MaxPerCommit], origin, 1, 1, known); err != nil {
		t.Errorf("%d reactions: %v", MaxPerCommit, err)
	}
}

// The idempotency key is the JSON array as JSON.stringify writes it:
// quotes, backslashes and control characters escaped, and nothing else
// (no HTML escapes, no \u2028).
func TestIdempotencyKeyEncoding(t *testing.T) {
	got := store.ReactionIdempotencyKey("p<&>", "c\"\\", "cc\n\x01\x1f", "k\u2028é")
	want := `["p<&>","c\"\\","cc\n\u0001\u001f","k` + "\u2028" + `é"]`
	if got != want {
		t.Errorf("key %s; want %s", got, want)
	}
	var back []string
	if err := json.Unmarshal([]byte(got), &back); err != nil || back[1] != "c\"\\" || back[2] != "cc\n\x01\x1f" {
		t.Errorf("key does not decode back: %v %q", err, back)
	}
}

func TestBackoffBoundsAndJitter(t *testing.T) {
	const initial, maxB = time.Second, 5 * time.Minute
	for attempt, ceiling := range map[int]time.Duration{1: time.Second, 2: 2 * time.Second, 3: 4 * time.Second, 9: 256 * time.Second, 10: maxB, 70: maxB, 0: time.Second} {
		seen := map[time.Duration]bool{}
		for range 200 {
			d := Backoff(attempt, initial, maxB)
			if d < ceiling/2 || d > ceiling {
				t.Fatalf("Backoff(%d) = %v; want within [%v, %v]", attempt, d, ceiling/2, ceiling)
			}
			seen[d] = true
		}
		if len(seen) < 10 {
			t.Errorf("Backoff(%d) took %d values in 200 draws: no jitter", attempt, len(seen))
		}
	}
}

func TestErrorsKeepTheirCodeAndBoundedDetails(t *testing.T) {
	e := Retry("app.busy", map[string]any{"retryAfter": 3})
	if e.Code() != "app.busy" || e.IsPermanent() || string(e.DetailsJSON()) != `{"retryAfter":3}` {
		t.Errorf("Retry = %s %v %s", e.Code(), e.IsPermanent(), e.DetailsJSON())
	}
	p := Permanent("bad code!", []int{1})
	if p.Code() != CodeHandlerFailed || !p.IsPermanent() || p.DetailsJSON() != nil {
		t.Errorf("Permanent with an invalid code and non-object details = %s %v %s", p.Code(), p.IsPermanent(), p.DetailsJSON())
	}
	if big := Retry("app.x", map[string]string{"s": strings.Repeat("x", MaxDetailsBytes)}); big.DetailsJSON() != nil {
		t.Errorf("details over %d bytes were kept", MaxDetailsBytes)
	}
}

func TestConfigCheck(t *testing.T) {
	for _, c := range []Config{
		{Handlers: map[string]Handler{"bad name": nil}},
		{Handlers: map[string]Handler{"mail": nil}},
	} {
		if err := c.Check(); err == nil {
			t.Errorf("Check(%v) = nil", c.Handlers)
		}
	}
	d := Config{MaxBackoff: time.Millisecond, InitialBackoff: time.Second}.WithDefaults()
	if d.Workers != 4 || d.LeaseDuration != 30*time.Second || d.MaxBackoff != time.Second || d.PruneInterval != time.Hour {
		t.Errorf("defaults %+v", d)
	}
}

// FuzzNormalizePayload: any input is refused or normalized to compact JSON
// within the bounds that Postgres's jsonb holds, which normalizes to itself and means the same value.
func FuzzNormalizePayload(f *testing.F) {
	for _, s := range []string{`{"b":1,"a":[true,null,"x"]}`, `"\u2028<>&"`, `1e400`, `[[[[]]]]`, `{"a":1,"a":2}`,
		` 12.50 `, `{}`, `"\ud800"`, `-0`, `1E+2`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		out, err := NormalizePayload(json.RawMessage(in))
		if err != nil {
			return
		}
		if len(out) > MaxPayloadBytes || !json.Valid(out) || !jsonb.Holds(string(out)) {
			t.Fatalf("normalized %q to %q", in, out)
		}
		again, err := NormalizePayload(json.RawMessage(out))
		if err != nil || !bytes.Equal(again, out) {
			t.Fatalf("%q normalizes to %q, then to %q (%v)", in, out, again, err)
		}
		var a, b any
		if json.Unmarshal(in, &a) != nil || json.Unmarshal(out, &b) != nil {
			t.Fatalf("%q or %q does not decode", in, out)
		}
		if ja, _ := json.Marshal(a); !bytes.Equal(ja, mustMarshal(b)) {
			t.Fatalf("%q and %q differ in value", in, out)
		}
	})
}

func mustMarshal(v any) []byte {
	b, _ := json.Marshal(v)
	return b
}
