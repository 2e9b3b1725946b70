package syncgo_test

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/syncgo/syncgo"
	"github.com/syncgo/syncgo/internal/sspclient"
	"github.com/syncgo/syncgo/reaction"
	"github.com/syncgo/syncgo/store"
	"github.com/syncgo/syncgo/webhook"
	"github.com/syncgo/syncgo/wire"
)

// Webhooks of a Go host (package webhook on durable reactions) end to end.

// A commit whose change list alone (rows omitted) passes a reaction's
// payload bound is still accepted and still plans its event: a webhook on
// a table must not make a large, valid commit unpushable (docs/reactions.md:
// "An event whose rows would pass 60 KiB is planned without them").
func TestE2EWebhookLargeCommitIsPlanned(t *testing.T) {
	forEachDriver(t, func(t *testing.T, d e2eDriver) {
		e := reactionServer(t, newReactionDB(t, d), nil, func(c *syncgo.Config) {
			planner, handlers, err := webhook.Reactions([]webhook.Hook{{Name: "task-events", URL: "http://127.0.0.1:1/hook",
				Tables: []string{"tasks"}}}, c.Schema, nil)
			if err != nil {
				t.Fatal(err)
			}
			// Plan only: no runner, so nothing is delivered.
			c.Reactions = fastReactions(&syncgo.ReactionConfig{Planner: planner, Handlers: handlers, Workers: -1})
		})
		c := e.client("alice", sspclient.Options{})
		syncQuiet(t, c)
		// 500 operations (the default MaxOperationsPerRequest) with ids of
		// 120 bytes: about 80 KiB of changes even without their rows.
		ids, titles := make([]string, 500), make([]string, 500)
		for i := range ids {
			ids[i] = fmt.Sprintf("%s-%04d", strings.Repeat("t", 115), i)
			titles[i] = "x"
		}
		if o := pushTasks(t, c, "p1", ids, titles); o.Status != wire.PushApplied {
			t.Fatalf("push of 500 tasks on a hooked table: %s", statusOf(o))
		}
		rs := reactionsIn(t, e.srv, store.ReactionQuery{})
		if len(rs) != 1 || rs[0].Type != "task-events" || len(rs[0].Payload) > reaction.MaxPayloadBytes {
			t.Fatalf("%d reactions planned; want one task-events event within the payload bound", len(rs))
		}
		var ev struct {
			Changes        []map[string]any `json:"changes"`
			RowsOmitted    bool             `json:"rows_omitted"`
			ChangesOmitted int              `json:"changes_omitted"`
		}
		if err := json.Unmarshal(rs[0].Payload, &ev); err != nil {
			t.Fatal(err)
		}
		if !ev.RowsOmitted || len(ev.Changes) == 0 || len(ev.Changes)+ev.ChangesOmitted != len(ids) ||
			ev.Changes[0]["row_id"] != ids[0] {
			t.Errorf("event: rows omitted %v, %d changes listed, %d omitted; want the first changes listed and the rest counted",
				ev.RowsOmitted, len(ev.Changes), ev.ChangesOmitted)
		}
	})
}

// A Go host's hook mid-rotation (Secret new, PreviousSecrets old), on
// both drivers: each delivery carries both signatures, and a receiver
// holding only the old secret and one holding only the new secret each
// verify every delivery; one holding another secret verifies none
// (docs/reactions.md, "Rotating a secret").
func TestE2EWebhookSecretRotation(t *testing.T) {
	const (
		oldSecret   = "e2e-old-secret-0123456789"
		newSecret   = "e2e-new-secret-0123456789"
		otherSecret = "e2e-other-secret-0123456789"
	)
	forEachDriver(t, func(t *testing.T, d e2eDriver) {
		var (
			mu       sync.Mutex
			verified = map[string]int{}
			failures []string
		)
		// The two receivers check the same delivery; the endpoint
		// refuses it (a dead letter) unless both verify it.
		rcv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			body, _ := io.ReadAll(r.Body)
			h := r.Header.Get("Syncgo-Signature")
			mu.Lock()
			defer mu.Unlock()
			ok := true
			for name, secret := range map[string]string{"old": oldSecret, "new": newSecret} {
				if err := webhook.Verify([]byte(secret), h, body, time.Now(), time.Minute); err != nil {
					failures, ok = append(failures, fmt.Sprintf("the %s secret: %v (%q)", name, err, h)), false
				} else {
					verified[name]++
				}
			}
			if webhook.Verify([]byte(otherSecret), h, body, time.Now(), time.Minute) == nil {
				failures = append(failures, "another secret verified "+h)
			}
			if strings.Count(h, "v1=") != 2 {
				failures = append(failures, "not two signatures: "+h)
			}
			if !ok {
				w.WriteHeader(http.StatusUnauthorized)
			}
		}))
		t.Cleanup(rcv.Close)
		e := reactionServer(t, newReactionDB(t, d), nil, func(c *syncgo.Config) {
			planner, handlers, err := webhook.Reactions([]webhook.Hook{{Name: "task-events", URL: rcv.URL, Tables: []string{"tasks"},
				Secret: newSecret, PreviousSecrets: []string{oldSecret}}}, c.Schema, nil)
			if err != nil {
				t.Fatal(err)
			}
			c.Reactions = fastReactions(&syncgo.ReactionConfig{Planner: planner, Handlers: handlers})
		})
		c := e.client("alice", sspclient.Options{})
		syncQuiet(t, c)
		const n = 5
		for i := range n {
			if o := pushTasks(t, c, "p1", []string{fmt.Sprintf("t%d", i)}, []string{"x"}); o.Status != wire.PushApplied {
				t.Fatalf("push %d: %s", i, statusOf(o))
			}
		}
		waitFor(t, 30*time.Second, "every delivery settled", func() bool {
			settled := 0
			for _, r := range reactionsIn(t, e.srv, store.ReactionQuery{}) {
				if r.State == store.ReactionCompleted || r.State == store.ReactionDead {
					settled++
				}
			}
			return settled == n
		})
		for _, r := range reactionsIn(t, e.srv, store.ReactionQuery{}) {
			if r.State != store.ReactionCompleted || r.Attempts != 1 {
				t.Errorf("reaction %s: %s after %d attempts; want completed at the first", r.IdempotencyKey, r.State, r.Attempts)
			}
		}
		mu.Lock()
		defer mu.Unlock()
		if len(failures) > 0 || verified["old"] != n || verified["new"] != n {
			t.Errorf("verified by the old secret %d, by the new %d of %d deliveries; failures %q", verified["old"], verified["new"], n, failures)
		}
	})
}
