package cli_test

import (
	"context"
	"encoding/json"
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

// `syncgo serve` stopped (SIGINT) while a webhook delivery hangs on its
// endpoint: the stop is bounded like the rest of the process's stop
// (docs/deployment.md), not by the hook's timeout, and the delivery under
// way is given back (pending, its attempt not counted) to be delivered
// after the restart (docs/reactions.md, Stop).
func TestBinaryStopGivesBackWebhookDeliveries(t *testing.T) {
	bin := binarytest.Build(t)
	for _, driver := range []string{"sqlite", "postgres"} {
		t.Run(driver, func(t *testing.T) {
			var (
				healed  atomic.Bool
				arrived = make(chan struct{}, 16)
				quit    = make(chan struct{})
				bodies  = make(chan []byte, 16)
			)
			hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				b, _ := io.ReadAll(r.Body)
				if healed.Load() {
					bodies <- b
					return
				}
				arrived <- struct{}{}
				select { // hangs until the delivery gives up
				case <-r.Context().Done():
				case <-quit:
				}
			}))
			defer hs.Close()
			defer close(quit)
			dir := t.TempDir()
			cfg := filepath.Join(dir, "syncgo.yaml")
			must(t, os.WriteFile(cfg, []byte(fmt.Sprintf(`listen: 127.0.0.1:0
webhooks:
  - name: task-events
    url: %s/hooks
    tables: [tasks]
    timeout: 2m
`, hs.URL)), 0o600))
			args := []string{"-config", cfg}
			if driver == "postgres" {
				args = append(args, "-db", pgtest.Schema(t, "webhookstop", false))
			}
			p := binarytest.Serve(t, bin, binarytest.Options{Dir: dir}, args...)
			c, _ := sspclient.New(p.URL, "alice", schemaDemo(t), sspclient.Options{})
			_, err := c.Upsert("projects", map[string]any{"id": "p1", "name": "Home"})
			must(t, err)
			_, err = c.Upsert("tasks", map[string]any{"id": "t1", "project_id": "p1", "title": "milk", "done": false, "notes": nil})
			must(t, err)
			if _, err := c.SyncUntilQuiet(context.Background(), 10); err != nil {
				t.Fatal(err)
			}
			select {
			case <-arrived:
			case <-time.After(20 * time.Second):
				t.Fatal("the delivery did not reach the endpoint")
			}
			start := time.Now()
			must(t, p.Cmd.Process.Signal(os.Interrupt))
			select {
			case <-p.Exited():
			case <-time.After(40 * time.Second):
				_ = p.Cmd.Process.Kill()
				t.Fatalf("the process still runs %v after SIGINT: its stop waits for the hanging delivery (hook timeout 2m)",
					time.Since(start).Round(time.Second))
			}
			if d := time.Since(start); d > 30*time.Second {
				t.Errorf("the stop took %v", d)
			}
			db := dbOf(dir, args)
			out, errOut, code := binarytest.Run(t, bin, nil, "reactions", "list", "-db", db, "-state", "pending")
			if code != 0 || !strings.Contains(out, "webhook:task-events") || !strings.Contains(out, " 0/10 ") {
				t.Errorf("after the stop, the delivery under way is not pending with its attempt given back:\n%s%s", out, errOut)
			}
			// After a restart it is delivered, as its first attempt.
			healed.Store(true)
			binarytest.Serve(t, bin, binarytest.Options{Dir: dir}, args...)
			select {
			case b := <-bodies:
				var env struct{ Attempt int }
				if err := json.Unmarshal(b, &env); err != nil || env.Attempt != 1 {
					t.Errorf("delivery after the restart: %s", b)
				}
			case <-time.After(20 * time.Second):
				t.Fatal("the given-back delivery was not delivered after the restart")
			}
		})
	}
}
