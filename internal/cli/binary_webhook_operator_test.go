package cli_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/syncgo/syncgo/internal/binarytest"
	"github.com/syncgo/syncgo/internal/pgtest"
	"github.com/syncgo/syncgo/internal/sspclient"
)

// `syncgo reactions retry|drop` on the database of a serving process: an
// endpoint answering 410 dead-letters the events at once; once it is
// fixed, a retried dead letter is delivered by the serving process, a
// dropped one is gone, and neither command waits on the server.
func TestBinaryWebhookDeadLettersRetriedWhileServing(t *testing.T) {
	bin := binarytest.Build(t)
	for _, driver := range []string{"sqlite", "postgres"} {
		t.Run(driver, func(t *testing.T) {
			var (
				healed    atomic.Bool
				delivered = make(chan string, 16)
			)
			hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				b, _ := io.ReadAll(r.Body)
				if !healed.Load() {
					w.WriteHeader(http.StatusGone)
					return
				}
				delivered <- string(b)
			}))
			defer hs.Close()
			dir := t.TempDir()
			cfg := filepath.Join(dir, "syncgo.yaml")
			must(t, os.WriteFile(cfg, []byte(fmt.Sprintf("listen: 127.0.0.1:0\nwebhooks:\n  - {name: task-events, url: '%s/hooks', tables: [tasks]}\n",
				hs.URL)), 0o600))
			args := []string{"-config", cfg}
			if driver == "postgres" {
				args = append(args, "-db", pgtest.Schema(t, "webhookops", false))
			}
			db := dbOf(dir, args)
			p := binarytest.Serve(t, bin, binarytest.Options{Dir: dir}, args...)
			c, _ := sspclient.New(p.URL, "alice", schemaDemo(t), sspclient.Options{})
			_, err := c.Upsert("projects", map[string]any{"id": "p1", "name": "Home"})
			must(t, err)
			for _, id := range []string{"t1", "t2"} {
				_, err = c.Upsert("tasks", map[string]any{"id": id, "project_id": "p1", "title": id, "done": false, "notes": nil})
				must(t, err)
				if _, err := c.SyncUntilQuiet(context.Background(), 10); err != nil {
					t.Fatal(err)
				}
			}
			var keys []string
			deadline := time.Now().Add(20 * time.Second)
			for len(keys) < 2 {
				if time.Now().After(deadline) {
					t.Fatalf("dead letters: %q", keys)
				}
				time.Sleep(100 * time.Millisecond)
				out, errOut, code := binarytest.Run(t, bin, nil, "reactions", "list", "-db", db)
				if code != 0 {
					t.Fatalf("reactions list: exit %d\n%s", code, errOut)
				}
				keys = nil
				for _, line := range strings.Split(out, "\n") {
					if f := strings.Fields(line); len(f) > 4 && strings.Contains(f[1], "webhook:task-events") {
						if f[3] != "dead-letter" || f[4] != "1/10" || !strings.Contains(line, "webhook.refused") {
							t.Errorf("dead letter line %q; want attempt 1/10 and webhook.refused", line)
						}
						keys = append(keys, f[1])
					}
				}
			}
			healed.Store(true)
			start := time.Now()
			if out, errOut, code := binarytest.Run(t, bin, nil, "reactions", "retry", "-db", db, "-partition", "default", "-key", keys[0]); code != 0 {
				t.Fatalf("reactions retry: exit %d\n%s%s", code, out, errOut)
			}
			if out, errOut, code := binarytest.Run(t, bin, nil, "reactions", "drop", "-db", db, "-partition", "default", "-key", keys[1]); code != 0 {
				t.Fatalf("reactions drop: exit %d\n%s%s", code, out, errOut)
			}
			if d := time.Since(start); d > 10*time.Second {
				t.Errorf("retry and drop took %v beside the serving process", d)
			}
			select {
			case b := <-delivered:
				if !strings.Contains(b, `"attempt":1`) || !strings.Contains(b, strings.ReplaceAll(keys[0], `"`, `\"`)) {
					t.Errorf("the retried delivery: %s; want attempt 1 of %s", b, keys[0])
				}
			case <-time.After(20 * time.Second):
				t.Fatal("the retried dead letter was not delivered by the serving process")
			}
			select {
			case b := <-delivered:
				t.Errorf("a second delivery (the dropped dead letter?): %s", b)
			case <-time.After(2 * time.Second):
			}
			if _, _, code := binarytest.Run(t, bin, nil, "reactions", "retry", "-db", db, "-partition", "default", "-key", keys[1]); code != 1 {
				t.Errorf("retry of a dropped dead letter: exit %d; want 1", code)
			}
			out, _, _ := binarytest.Run(t, bin, nil, "reactions", "backlog", "-db", db)
			if !strings.Contains(out, "pending: 0\nrunning: 0\ndead letters: 0\n") {
				t.Errorf("backlog after retry and drop:\n%s", out)
			}
		})
	}
}

// `syncgo reactions rename` after a webhook is renamed in the config: the
// events planned under the old name (one pending, one dead letter) are
// delivered by the process serving the new name, which without the
// rename would never claim them.
func TestBinaryWebhookRenamedHookKeepsItsEvents(t *testing.T) {
	bin := binarytest.Build(t)
	for _, driver := range []string{"sqlite", "postgres"} {
		t.Run(driver, func(t *testing.T) {
			var (
				status    atomic.Int64
				delivered = make(chan string, 16)
			)
			status.Store(http.StatusGone)
			hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				b, _ := io.ReadAll(r.Body)
				if code := int(status.Load()); code != http.StatusOK {
					w.WriteHeader(code)
					return
				}
				delivered <- r.Header.Get("Syncgo-Webhook") + " " + string(b)
			}))
			defer hs.Close()
			dir := t.TempDir()
			cfg := filepath.Join(dir, "syncgo.yaml")
			writeConfig := func(name string) {
				must(t, os.WriteFile(cfg, []byte(fmt.Sprintf("listen: 127.0.0.1:0\nwebhooks:\n  - {name: %s, url: '%s/hooks', tables: [tasks]}\n",
					name, hs.URL)), 0o600))
			}
			writeConfig("task-events")
			args := []string{"-config", cfg}
			if driver == "postgres" {
				args = append(args, "-db", pgtest.Schema(t, "webhookrename", false))
			}
			db := dbOf(dir, args)
			p := binarytest.Serve(t, bin, binarytest.Options{Dir: dir}, args...)
			c, _ := sspclient.New(p.URL, "alice", schemaDemo(t), sspclient.Options{})
			_, err := c.Upsert("projects", map[string]any{"id": "p1", "name": "Home"})
			must(t, err)
			push := func(id string) {
				_, err := c.Upsert("tasks", map[string]any{"id": id, "project_id": "p1", "title": id, "done": false, "notes": nil})
				must(t, err)
				if _, err := c.SyncUntilQuiet(context.Background(), 10); err != nil {
					t.Fatal(err)
				}
			}
			// t1 dead-letters at once (410); t2 waits out retries (503).
			waitState := func(state string, n int) {
				t.Helper()
				deadline := time.Now().Add(20 * time.Second)
				for {
					out, errOut, code := binarytest.Run(t, bin, nil, "reactions", "list", "-db", db, "-state", state)
					if code != 0 {
						t.Fatalf("reactions list: exit %d\n%s", code, errOut)
					}
					if strings.Count(out, "webhook:task-events") == n {
						return
					}
					if time.Now().After(deadline) {
						t.Fatalf("want %d %s events of task-events:\n%s", n, state, out)
					}
					time.Sleep(100 * time.Millisecond)
				}
			}
			push("t1")
			waitState("dead-letter", 1)
			status.Store(http.StatusServiceUnavailable)
			push("t2")
			waitState("pending", 1)
			p.Stop()

			writeConfig("tasks-hook")
			out, errOut, code := binarytest.Run(t, bin, nil, "reactions", "rename", "-db", db, "-from", "task-events", "-to", "tasks-hook")
			if code != 0 || !strings.Contains(out, "renamed task-events to tasks-hook: 1 pending, 1 dead letters") {
				t.Fatalf("reactions rename: exit %d\n%s%s", code, out, errOut)
			}
			status.Store(http.StatusOK)
			binarytest.Serve(t, bin, binarytest.Options{Dir: dir}, args...)
			got := map[string]bool{}
			for len(got) < 1 {
				select {
				case b := <-delivered:
					if !strings.HasPrefix(b, "tasks-hook ") || !strings.Contains(b, `"t2"`) {
						t.Fatalf("delivered %s; want t2's event under tasks-hook", b)
					}
					got[b] = true
				case <-time.After(30 * time.Second):
					t.Fatal("the pending event of the renamed hook was not delivered")
				}
			}
			out, _, _ = binarytest.Run(t, bin, nil, "reactions", "list", "-db", db)
			var key string
			for _, line := range strings.Split(out, "\n") {
				if f := strings.Fields(line); len(f) > 3 && f[2] == "tasks-hook" && f[3] == "dead-letter" {
					key = f[1]
				}
			}
			if key == "" {
				t.Fatalf("no dead letter under tasks-hook:\n%s", out)
			}
			if out, errOut, code := binarytest.Run(t, bin, nil, "reactions", "retry", "-db", db, "-partition", "default", "-key", key); code != 0 {
				t.Fatalf("reactions retry: exit %d\n%s%s", code, out, errOut)
			}
			select {
			case b := <-delivered:
				if !strings.HasPrefix(b, "tasks-hook ") || !strings.Contains(b, `"t1"`) {
					t.Errorf("delivered %s; want t1's event under tasks-hook", b)
				}
			case <-time.After(30 * time.Second):
				t.Fatal("the retried dead letter of the renamed hook was not delivered")
			}
			if _, errOut, code := binarytest.Run(t, bin, nil, "reactions", "rename", "-db", db, "-from", "tasks-hook", "-to", "tasks-hook"); code != 2 {
				t.Errorf("rename to the same name: exit %d; want 2\n%s", code, errOut)
			}
		})
	}
}
