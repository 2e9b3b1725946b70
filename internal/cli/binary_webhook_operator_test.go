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
