package cli_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/syncgo/syncgo/internal/binarytest"
	"github.com/syncgo/syncgo/internal/pgtest"
	"github.com/syncgo/syncgo/internal/sspclient"
	"github.com/syncgo/syncgo/webhook"
)

// `syncgo serve` with a webhook in its config file: the changes of the
// tasks table are POSTed to an HTTP receiver, signed, retried after a
// failure with the same delivery id, on SQLite and on Postgres.

const hookSecret = "webhook-secret-0123456789"

// hookReceiver records the deliveries and fails the first one with 503.
type hookReceiver struct {
	mu     sync.Mutex
	failed bool
	bodies [][]byte
	heads  []http.Header
	got    chan struct{}
}

func (r *hookReceiver) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	b, _ := io.ReadAll(req.Body)
	r.mu.Lock()
	r.bodies, r.heads = append(r.bodies, b), append(r.heads, req.Header.Clone())
	first := !r.failed
	r.failed = true
	r.mu.Unlock()
	r.got <- struct{}{}
	if first {
		w.WriteHeader(http.StatusServiceUnavailable)
	}
}

func TestBinaryWebhooks(t *testing.T) {
	bin := binarytest.Build(t)
	for _, driver := range []string{"sqlite", "postgres"} {
		t.Run(driver, func(t *testing.T) {
			rcv := &hookReceiver{got: make(chan struct{}, 16)}
			hs := httptest.NewServer(rcv)
			defer hs.Close()
			dir := t.TempDir()
			cfg := filepath.Join(dir, "syncgo.yaml")
			must(t, os.WriteFile(cfg, []byte(fmt.Sprintf(`listen: 127.0.0.1:0
webhooks:
  - name: task-events
    url: %s/hooks?source=syncgo
    tables: [tasks]
    secret: ${HOOK_SECRET}
    headers: {X-Api-Key: k-123}
    timeout: 5s
`, hs.URL)), 0o600))
			env := []string{"HOOK_SECRET=" + hookSecret}
			out, errOut, code := binarytest.Run(t, bin, env, "config", "check", cfg)
			if code != 0 || !strings.Contains(out, "webhook task-events: changes of tasks to "+hs.URL+"/hooks (signed)") {
				t.Errorf("config check: exit %d\n%s%s", code, out, errOut)
			}
			bad := filepath.Join(dir, "bad.yaml")
			must(t, os.WriteFile(bad, []byte("webhooks:\n  - {name: x, url: 'http://h/', tables: [todos]}\n"), 0o600))
			if _, errOut, code := binarytest.Run(t, bin, nil, "config", "check", bad); code == 0 || !strings.Contains(errOut, `no table "todos"`) {
				t.Errorf("config check of a hook on an unknown table: exit %d\n%s", code, errOut)
			}
			args := []string{"-config", cfg, "-admin-listen", "127.0.0.1:0"}
			if driver == "postgres" {
				args = append(args, "-db", pgtest.Schema(t, "webhook", false))
			}
			p := binarytest.Serve(t, bin, binarytest.Options{Dir: dir, Env: env}, args...)
			if !strings.Contains(p.Stderr.String(), "task-events") || strings.Contains(p.Stderr.String(), "source=syncgo") {
				t.Errorf("start log does not name the webhook, or shows its query:\n%s", p.Stderr)
			}
			c, _ := sspclient.New(p.URL, "alice", schemaDemo(t), sspclient.Options{})
			_, err := c.Upsert("projects", map[string]any{"id": "p1", "name": "Home"})
			must(t, err)
			_, err = c.Upsert("tasks", map[string]any{"id": "t1", "project_id": "p1", "title": "milk", "done": false, "notes": nil})
			must(t, err)
			if _, err := c.SyncUntilQuiet(context.Background(), 10); err != nil {
				t.Fatal(err)
			}
			// The first delivery fails with 503; the runner retries after
			// its backoff (1 s at most for the first).
			for i := range 2 {
				select {
				case <-rcv.got:
				case <-time.After(20 * time.Second):
					db := filepath.Join(dir, "syncgo.db")
					if driver == "postgres" {
						db = args[len(args)-1]
					}
					out, errOut, _ := binarytest.Run(t, bin, nil, "reactions", "list", "-db", db, "-state", "all")
					t.Fatalf("delivery %d did not arrive; reactions:\n%s%s", i+1, out, errOut)
				}
			}
			rcv.mu.Lock()
			defer rcv.mu.Unlock()
			var ids []string
			for i, b := range rcv.bodies[:2] {
				h := rcv.heads[i]
				if err := webhook.Verify([]byte(hookSecret), h.Get("Syncgo-Signature"), b, time.Now(), time.Minute); err != nil {
					t.Errorf("delivery %d: %v", i+1, err)
				}
				if h.Get("X-Api-Key") != "k-123" || h.Get("Syncgo-Webhook") != "task-events" {
					t.Errorf("delivery %d headers %v", i+1, h)
				}
				ids = append(ids, h.Get("Syncgo-Delivery"))
				var env struct {
					ID      string `json:"id"`
					Attempt int    `json:"attempt"`
					Event   struct {
						Hook      string `json:"hook"`
						ActorID   string `json:"actor_id"`
						CommitSeq int64  `json:"commit_seq"`
						Changes   []struct {
							Table, Op string
							RowID     string         `json:"row_id"`
							Row       map[string]any `json:"row"`
						} `json:"changes"`
					} `json:"event"`
				}
				must(t, json.Unmarshal(b, &env))
				ev := env.Event
				if env.Attempt != i+1 || ev.Hook != "task-events" || ev.ActorID != "alice" || ev.CommitSeq < 1 || len(ev.Changes) != 1 ||
					ev.Changes[0].Table != "tasks" || ev.Changes[0].RowID != "t1" || ev.Changes[0].Op != "insert" || ev.Changes[0].Row["title"] != "milk" {
					t.Errorf("delivery %d: %s", i+1, b)
				}
			}
			if ids[0] == "" || ids[0] != ids[1] {
				t.Errorf("delivery ids %v: want one id on both attempts", ids)
			}
			if len(rcv.bodies) != 2 {
				t.Errorf("%d deliveries; want 2 (the projects row is not hooked)", len(rcv.bodies))
			}

			// The admin listener shows the completed reaction, its payload
			// on request, and refuses a bad state.
			_, rest, _ := strings.Cut(p.Stdout.String(), "syncgo admin listening on ")
			admin, _, _ := strings.Cut(rest, " ")
			var page struct {
				Backlog   struct{ Pending, Running, Dead int64 }
				Reactions []struct {
					Name, State, IdempotencyKey string
					Attempts                    int
					Payload                     json.RawMessage
				}
			}
			eventually(t, "the reaction completed", func() bool {
				resp, err := http.Get(admin + "/admin/reactions?state=completed&payload=true")
				if err != nil {
					return false
				}
				defer resp.Body.Close()
				page.Reactions = nil
				return resp.StatusCode == 200 && json.NewDecoder(resp.Body).Decode(&page) == nil && len(page.Reactions) == 1
			})
			r := page.Reactions[0]
			if r.Name != "task-events" || r.Attempts != 2 || !strings.Contains(string(r.Payload), `"row_id":"t1"`) ||
				!strings.Contains(r.IdempotencyKey, "webhook:task-events") || page.Backlog.Pending != 0 || page.Backlog.Dead != 0 {
				t.Errorf("admin reactions: %+v", page)
			}
			getPage := func(query string) (int, map[string]json.RawMessage) {
				t.Helper()
				resp, err := http.Get(admin + "/admin/reactions?" + query)
				if err != nil {
					t.Fatal(err)
				}
				defer resp.Body.Close()
				var m map[string]json.RawMessage
				_ = json.NewDecoder(resp.Body).Decode(&m)
				return resp.StatusCode, m
			}
			if code, m := getPage("state=done"); code != http.StatusBadRequest || m["error"] == nil {
				t.Errorf("a bad state: %d %s", code, m["error"])
			}
			// Keyset paging: a page of one names the next; after it, nothing.
			code, m := getPage("limit=1")
			var next struct{ Partition, IdempotencyKey string }
			if code != 200 || json.Unmarshal(m["next"], &next) != nil || next.IdempotencyKey != r.IdempotencyKey || strings.Contains(string(m["reactions"]), "payload") {
				t.Fatalf("limit=1: %d %s", code, m)
			}
			code, m = getPage("limit=1&after_partition=" + url.QueryEscape(next.Partition) + "&after_key=" + url.QueryEscape(next.IdempotencyKey))
			if code != 200 || string(m["reactions"]) != "[]" || string(m["next"]) != "null" {
				t.Errorf("the page after the last: %d %s", code, m)
			}
		})
	}
}
