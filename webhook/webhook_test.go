package webhook

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/syncgo/syncgo/reaction"
	"github.com/syncgo/syncgo/schema"
	"github.com/syncgo/syncgo/validate"
	"github.com/syncgo/syncgo/wire"
)

func testSchema(t *testing.T) *schema.Compiled {
	t.Helper()
	c, err := schema.New(1).
		Table("todos", "id", schema.String("id"), schema.String("list_id"), schema.String("title")).Scope("list:{list_id}").
		Table("notes", "id", schema.String("id"), schema.String("list_id"), schema.String("body")).Scope("list:{list_id}").
		Compile()
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func TestCheckRefuses(t *testing.T) {
	sc := testSchema(t)
	ok := Hook{Name: "todo-events", URL: "https://hooks.example.com/x", Tables: []string{"todos"}}
	if err := Check([]Hook{ok}, sc); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		mod  func(*Hook)
		want string
	}{
		{func(h *Hook) { h.Name = "" }, "name"},
		{func(h *Hook) { h.Name = "bad name" }, "name"},
		{func(h *Hook) { h.URL = "ftp://x/y" }, "http or https"},
		{func(h *Hook) { h.URL = "/relative" }, "http or https"},
		{func(h *Hook) { h.Tables = nil }, "at least one table"},
		{func(h *Hook) { h.Tables = []string{"lists"} }, `no table "lists"`},
		{func(h *Hook) { h.Ops = []string{"upsert"} }, `"upsert"`},
		{func(h *Hook) { h.Secret = "short" }, "at least 16"},
		{func(h *Hook) { h.Headers = map[string]string{"Syncgo-Signature": "x"} }, "set by the delivery"},
		{func(h *Hook) { h.Headers = map[string]string{"content-type": "text/plain"} }, "set by the delivery"},
		{func(h *Hook) { h.Headers = map[string]string{"Bad Header": "x"} }, "not a valid header"},
		{func(h *Hook) { h.MaxAttempts = 101 }, "max_attempts"},
		{func(h *Hook) { h.Timeout = -time.Second }, "timeout"},
	} {
		h := ok
		c.mod(&h)
		if err := Check([]Hook{h}, sc); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: %v; want an error naming %q", h, err, c.want)
		}
	}
	if err := Check([]Hook{ok, ok}, sc); err == nil || !strings.Contains(err.Error(), "twice") {
		t.Errorf("a name used twice: %v", err)
	}
}

// commit builds a planner's view of a commit.
func commit(ops ...validate.Operation) *reaction.Commit {
	return &reaction.Commit{Origin: validate.Origin{ActorID: "alice", Partition: "p", ClientID: "c1", ClientCommitID: "cc1"},
		Seq: 7, CreatedAt: time.Unix(1700000000, 0), Operations: ops}
}

func TestPlan(t *testing.T) {
	sc := testSchema(t)
	planner, handlers, err := Reactions([]Hook{
		{Name: "all", URL: "http://x/", Tables: []string{"todos"}},
		{Name: "deletes", URL: "http://x/", Tables: []string{"todos", "notes"}, Ops: []string{OpDelete}, MaxAttempts: 3},
	}, sc, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(handlers) != 2 {
		t.Fatalf("handlers %v", handlers)
	}
	row := validate.Row{"id": "t1", "list_id": "l1", "title": "milk"}
	plans, err := planner(context.Background(), commit(
		validate.Operation{Op: wire.OpUpsert, Table: "todos", RowID: "t1", Row: row},
		validate.Operation{Op: wire.OpUpsert, Table: "todos", RowID: "t2", Row: row, Stored: row},
		validate.Operation{Op: wire.OpDelete, Table: "todos", RowID: "t3", Stored: row},
		validate.Operation{Op: wire.OpDelete, Table: "todos", RowID: "absent"},
		validate.Operation{Op: wire.OpDelete, Table: "notes", RowID: "n1", Stored: row},
		validate.Operation{Op: wire.OpUpsert, Table: "notes", RowID: "n2", Row: row},
	))
	if err != nil {
		t.Fatal(err)
	}
	if len(plans) != 2 {
		t.Fatalf("%d plans; want 2", len(plans))
	}
	var ev event
	if err := json.Unmarshal(plans[0].Payload.(json.RawMessage), &ev); err != nil {
		t.Fatal(err)
	}
	got := []string{}
	for _, c := range ev.Changes {
		got = append(got, c.Table+"/"+c.RowID+"/"+c.Op)
	}
	if strings.Join(got, " ") != "todos/t1/insert todos/t2/update todos/t3/delete" || ev.Changes[0].Row["title"] != "milk" ||
		ev.Changes[2].Row != nil || ev.CommitSeq != 7 || ev.ActorID != "alice" || ev.Hook != "all" || plans[0].Name != "all" {
		t.Errorf("event %+v (%v)", ev, got)
	}
	if err := json.Unmarshal(plans[1].Payload.(json.RawMessage), &ev); err != nil {
		t.Fatal(err)
	}
	if len(ev.Changes) != 2 || ev.Changes[0].RowID != "t3" || ev.Changes[1].RowID != "n1" || plans[1].MaxAttempts != 3 {
		t.Errorf("deletes hook: %+v", ev)
	}

	// Nothing of the hook's tables: no plan.
	if plans, _ := planner(context.Background(), commit(validate.Operation{Op: wire.OpUpsert, Table: "notes", RowID: "n", Row: row})); len(plans) != 0 {
		t.Errorf("a notes upsert planned %d", len(plans))
	}
	// Rows too large for a reaction's payload are left out, the changes kept.
	big := validate.Row{"id": "t", "list_id": "l", "title": strings.Repeat("x", reaction.MaxPayloadBytes/2)}
	plans, err = planner(context.Background(), commit(
		validate.Operation{Op: wire.OpUpsert, Table: "todos", RowID: "b1", Row: big},
		validate.Operation{Op: wire.OpUpsert, Table: "todos", RowID: "b2", Row: big}))
	if err != nil || len(plans) != 1 {
		t.Fatalf("large rows: %v, %d plans", err, len(plans))
	}
	ev = event{}
	if err := json.Unmarshal(plans[0].Payload.(json.RawMessage), &ev); err != nil {
		t.Fatal(err)
	}
	if !ev.RowsOmitted || len(ev.Changes) != 2 || ev.Changes[0].Row != nil {
		t.Errorf("large rows: %+v", ev)
	}
}

// receiver records deliveries and answers the statuses queued.
type receiver struct {
	mu       sync.Mutex
	statuses []int
	got      []*http.Request
	bodies   [][]byte
}

func (r *receiver) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	b, _ := io.ReadAll(req.Body)
	r.mu.Lock()
	defer r.mu.Unlock()
	r.got, r.bodies = append(r.got, req), append(r.bodies, b)
	status := http.StatusOK
	if len(r.statuses) > 0 {
		status, r.statuses = r.statuses[0], r.statuses[1:]
	}
	w.WriteHeader(status)
}

func TestDeliver(t *testing.T) {
	sc := testSchema(t)
	rcv := &receiver{statuses: []int{200, 503, 429, 400, 410, 302}}
	srv := httptest.NewServer(rcv)
	defer srv.Close()
	secret := "0123456789abcdef-secret"
	_, handlers, err := Reactions([]Hook{{Name: "h", URL: srv.URL + "/in?k=1", Tables: []string{"todos"}, Secret: secret,
		Headers: map[string]string{"X-Api-Key": "k1"}, Timeout: 10 * time.Second}}, sc, nil)
	if err != nil {
		t.Fatal(err)
	}
	d := &reaction.Delivery{Partition: "p", IdempotencyKey: `["p","c1","cc1","webhook:h"]`, Name: "h", Version: 1,
		Payload: json.RawMessage(`{"changes":[],"hook":"h"}`), Attempt: 2, MaxAttempts: 10}
	ctx := context.Background()
	if err := handlers["h"](ctx, d); err != nil {
		t.Fatalf("200: %v", err)
	}
	req, body := rcv.got[0], rcv.bodies[0]
	if err := Verify([]byte(secret), req.Header.Get("Syncgo-Signature"), body, time.Now(), time.Minute); err != nil {
		t.Errorf("signature: %v", err)
	}
	if err := Verify([]byte(secret), req.Header.Get("Syncgo-Signature"), append(body, ' '), time.Now(), time.Minute); err == nil {
		t.Error("a changed body verified")
	}
	if err := Verify([]byte(secret), req.Header.Get("Syncgo-Signature"), body, time.Now().Add(time.Hour), time.Minute); err == nil {
		t.Error("an hour-old signature verified")
	}
	if err := Verify(nil, Sign(nil, time.Now(), body), body, time.Now(), time.Minute); err == nil {
		t.Error("an empty secret verified a signature anyone can make")
	}
	var env struct {
		ID      string          `json:"id"`
		Attempt int             `json:"attempt"`
		Event   json.RawMessage `json:"event"`
	}
	if err := json.Unmarshal(body, &env); err != nil || env.ID != d.IdempotencyKey || env.Attempt != 2 || string(env.Event) != string(d.Payload) {
		t.Errorf("body %s (%v)", body, err)
	}
	if req.Header.Get("X-Api-Key") != "k1" || req.Header.Get("Syncgo-Webhook") != "h" || len(req.Header.Get("Syncgo-Delivery")) != 64 ||
		req.Header.Get("Content-Type") != "application/json" || req.URL.RawQuery != "k=1" {
		t.Errorf("headers %v, query %q", req.Header, req.URL.RawQuery)
	}
	for _, c := range []struct {
		status    int
		code      string
		permanent bool
	}{{503, CodeUnavailable, false}, {429, CodeUnavailable, false}, {400, CodeRefused, true}, {410, CodeRefused, true}, {302, CodeRefused, true}} {
		err := handlers["h"](ctx, d)
		var re *reaction.Error
		if !errors.As(err, &re) || re.Code() != c.code || re.IsPermanent() != c.permanent {
			t.Errorf("status %d: %v; want %s (permanent %v)", c.status, err, c.code, c.permanent)
		}
	}
	if a, b := rcv.got[0].Header.Get("Syncgo-Delivery"), rcv.got[1].Header.Get("Syncgo-Delivery"); a != b {
		t.Errorf("delivery ids differ between attempts: %s, %s", a, b)
	}

	// A receiver that does not answer in time, and one that is gone:
	// retried.
	slow := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-r.Context().Done(): // the delivery gave up
		case <-time.After(time.Second):
		}
	}))
	defer slow.Close()
	gone := httptest.NewServer(http.NotFoundHandler())
	gone.Close()
	for _, u := range []string{slow.URL, gone.URL} {
		_, hs, _ := Reactions([]Hook{{Name: "h", URL: u, Tables: []string{"todos"}, Timeout: 200 * time.Millisecond}}, sc, nil)
		err := hs["h"](ctx, d)
		var re *reaction.Error
		if !errors.As(err, &re) || re.Code() != CodeUnreachable || re.IsPermanent() {
			t.Errorf("%s: %v; want a retryable %s", u, err, CodeUnreachable)
		}
	}
	// An unknown payload version is dead-lettered.
	d.Version = 2
	var re *reaction.Error
	if err := handlers["h"](ctx, d); !errors.As(err, &re) || !re.IsPermanent() {
		t.Errorf("version 2: %v", err)
	}
}

// FuzzVerify: any header and body, never a panic, and only a signature
// made with the secret over that body verifies.
func FuzzVerify(f *testing.F) {
	secret := []byte("0123456789abcdef-fuzz")
	now := time.Unix(1700000000, 0)
	f.Add(Sign(secret, now, []byte(`{"a":1}`)), []byte(`{"a":1}`))
	f.Add("t=,v1=", []byte{})
	f.Add("t=1700000000,v1=zz,v1=00", []byte("x"))
	f.Add("v1=ab,t=+1700000000", []byte("x"))
	f.Fuzz(func(t *testing.T, header string, body []byte) {
		err := Verify(secret, header, body, now, time.Minute)
		if err == nil && header != Sign(secret, now, body) && !strings.Contains(header, " ") && !strings.Contains(header, ",,") {
			// A verified header must carry the signature of this body
			// at a time within the tolerance.
			var ts string
			for part := range strings.SplitSeq(header, ",") {
				if k, v, _ := strings.Cut(strings.TrimSpace(part), "="); k == "t" {
					ts = v
				}
			}
			sec, _ := strconv.ParseInt(ts, 10, 64)
			if !strings.Contains(header, Sign(secret, time.Unix(sec, 0), body)[len("t="+ts+","):]) {
				t.Fatalf("%q verified over %q", header, body)
			}
		}
	})
}

// More hooks than a commit may plan reactions would fail every push that
// changes a table they all watch (the planner's plans past
// reaction.MaxPerCommit fail the push with sync.internal_error): Check
// refuses such a configuration instead.
func TestCheckRefusesMoreHooksThanACommitPlans(t *testing.T) {
	sc := testSchema(t)
	hooks := make([]Hook, reaction.MaxPerCommit+1)
	for i := range hooks {
		hooks[i] = Hook{Name: "h" + strconv.Itoa(i), URL: "http://x/", Tables: []string{"todos"}}
	}
	planner, handlers, err := Reactions(hooks, sc, nil)
	if err != nil {
		if !strings.Contains(err.Error(), "webhooks") {
			t.Fatalf("refused with %v; want the count of hooks named", err)
		}
		return
	}
	plans, err := planner(context.Background(), commit(validate.Operation{Op: wire.OpUpsert, Table: "todos", RowID: "t1",
		Row: validate.Row{"id": "t1", "list_id": "l1", "title": "x"}}))
	if err != nil {
		t.Fatal(err)
	}
	_, err = reaction.Prepare(plans, validate.Origin{Partition: "p", ClientID: "c", ClientCommitID: "cc"}, 1, 1,
		func(name string) bool { return handlers[name] != nil })
	t.Fatalf("%d hooks were accepted, and a commit on their table plans %d reactions (%v): every such push fails",
		len(hooks), len(plans), err)
}

// TestEndpointHidesPathSecrets: the URL that logs and config check show
// keeps the scheme, host and first path segment, and drops credentials,
// query, fragment and the rest of the path, where incoming-webhook URLs
// keep their token.
func TestEndpointHidesPathSecrets(t *testing.T) {
	for in, want := range map[string]string{
		"https://hooks.example.com/services/T0/B0/s3cr3tToken":   "https://hooks.example.com/services/…",
		"https://user:pw@api.example.com:8443/sync?key=s3cr3t#x": "https://api.example.com:8443/sync",
		"https://api.example.com/hooks/":                         "https://api.example.com/hooks/",
		"https://api.example.com/":                               "https://api.example.com/",
		"https://api.example.com":                                "https://api.example.com",
		"http://10.0.0.5/a/s3cr3t":                               "http://10.0.0.5/a/…",
	} {
		got := Hook{URL: in}.Endpoint()
		if got != want {
			t.Errorf("Endpoint(%q) = %q, want %q", in, got, want)
		}
		if strings.Contains(got, "s3cr3t") || strings.Contains(got, "pw") {
			t.Errorf("Endpoint(%q) = %q shows a secret", in, got)
		}
	}
}
