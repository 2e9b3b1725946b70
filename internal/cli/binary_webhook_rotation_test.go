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
	"sync"
	"testing"
	"time"

	"github.com/syncgo/syncgo/internal/binarytest"
	"github.com/syncgo/syncgo/internal/pgtest"
	"github.com/syncgo/syncgo/internal/sspclient"
	"github.com/syncgo/syncgo/webhook"
)

// rotationReceiver records each delivery's signature header and body.
type rotationReceiver struct {
	mu    sync.Mutex
	heads []string
	body  [][]byte
}

func (r *rotationReceiver) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	b, _ := io.ReadAll(req.Body)
	r.mu.Lock()
	r.heads, r.body = append(r.heads, req.Header.Get("Syncgo-Signature")), append(r.body, b)
	r.mu.Unlock()
}

// A webhook's secret rotated through the documented steps with `syncgo
// serve` restarted between them, on SQLite and on Postgres: signed with
// the old secret; then with the new one and the old one as previous
// (previous_secret_files), when a receiver holding only the old secret
// and one holding only the new secret both verify the same deliveries;
// then with the new one alone. No secret shows in `config check`'s output
// or in the process's log.
func TestBinaryWebhookSecretRotation(t *testing.T) {
	bin := binarytest.Build(t)
	const (
		oldSecret   = "rotation-old-secret-0123456789"
		newSecret   = "rotation-new-secret-0123456789"
		otherSecret = "rotation-other-secret-0123456"
	)
	for _, driver := range []string{"sqlite", "postgres"} {
		t.Run(driver, func(t *testing.T) {
			rcv := &rotationReceiver{}
			hs := httptest.NewServer(rcv)
			defer hs.Close()
			dir := t.TempDir()
			must(t, os.WriteFile(filepath.Join(dir, "old.secret"), []byte(oldSecret+"\n"), 0o600))
			env := []string{"HOOK_SECRET_OLD=" + oldSecret, "HOOK_SECRET_NEW=" + newSecret}
			db := filepath.Join(dir, "syncgo.db")
			if driver == "postgres" {
				db = pgtest.Schema(t, "webhookrotation", false)
			}
			noSecret := func(what, out string) {
				t.Helper()
				for _, s := range []string{oldSecret, newSecret} {
					if strings.Contains(out, s) {
						t.Errorf("%s shows a secret:\n%s", what, out)
					}
				}
			}
			// A bad list is refused by config check without a secret shown.
			bad := filepath.Join(dir, "bad.yaml")
			must(t, os.WriteFile(bad, []byte(fmt.Sprintf(`webhooks:
  - name: task-events
    url: %s/hooks
    tables: [tasks]
    secret: ${HOOK_SECRET_NEW}
    previous_secrets: ["${HOOK_SECRET_NEW}", short-secret]
`, hs.URL)), 0o600))
			out, errOut, code := binarytest.Run(t, bin, env, "config", "check", bad)
			if code == 0 || !strings.Contains(errOut, "previous_secrets[0] is the secret itself") || !strings.Contains(errOut, "previous_secrets[1] has 12 bytes") {
				t.Errorf("config check of a bad previous_secrets: exit %d\n%s%s", code, out, errOut)
			}
			noSecret("config check of a bad list", out+errOut)

			phases := []struct {
				name, secrets, summary string
				verifies               map[string]bool // by the receiver's secret
				signatures             int
			}{
				{"old secret", "secret: ${HOOK_SECRET_OLD}", "(signed)", map[string]bool{oldSecret: true, newSecret: false}, 1},
				{"new secret, old one previous", "secret: ${HOOK_SECRET_NEW}\n    previous_secret_files: [old.secret]",
					"(signed with 2 secrets: the newest and 1 previous)", map[string]bool{oldSecret: true, newSecret: true}, 2},
				{"new secret", "secret: ${HOOK_SECRET_NEW}", "(signed)", map[string]bool{oldSecret: false, newSecret: true}, 1},
			}
			for i, ph := range phases {
				cfg := filepath.Join(dir, fmt.Sprintf("phase%d.yaml", i))
				must(t, os.WriteFile(cfg, []byte(fmt.Sprintf(`listen: 127.0.0.1:0
log:
  level: debug
webhooks:
  - name: task-events
    url: %s/hooks
    tables: [tasks]
    %s
    timeout: 5s
`, hs.URL, ph.secrets)), 0o600))
				out, errOut, code := binarytest.Run(t, bin, env, "config", "check", cfg)
				if code != 0 || !strings.Contains(out, "webhook task-events: changes of tasks to "+hs.URL+"/hooks "+ph.summary) {
					t.Errorf("%s: config check: exit %d\n%s%s", ph.name, code, out, errOut)
				}
				noSecret(ph.name+": config check", out+errOut)

				p := binarytest.Serve(t, bin, binarytest.Options{Dir: dir, Env: env}, "-config", cfg, "-db", db)
				c, err := sspclient.New(p.URL, "alice", schemaDemo(t), sspclient.Options{})
				must(t, err)
				if i == 0 {
					_, err = c.Upsert("projects", map[string]any{"id": "p1", "name": "Home"})
					must(t, err)
				}
				task := fmt.Sprintf("t%d", i)
				_, err = c.Upsert("tasks", map[string]any{"id": task, "project_id": "p1", "title": ph.name, "done": false, "notes": nil})
				must(t, err)
				if _, err := c.SyncUntilQuiet(context.Background(), 10); err != nil {
					t.Fatal(err)
				}
				// Delivery is at least once: the phase's delivery is the
				// first carrying its task.
				var head string
				var body []byte
				deadline := time.Now().Add(20 * time.Second)
				for head == "" {
					rcv.mu.Lock()
					for j, b := range rcv.body {
						if strings.Contains(string(b), `"row_id":"`+task+`"`) {
							head, body = rcv.heads[j], b
							break
						}
					}
					rcv.mu.Unlock()
					if head == "" {
						if time.Now().After(deadline) {
							t.Fatalf("%s: the delivery of %s did not arrive", ph.name, task)
						}
						time.Sleep(20 * time.Millisecond)
					}
				}
				p.Stop()
				noSecret(ph.name+": the log", p.Stdout.String()+p.Stderr.String())
				if n := strings.Count(head, "v1="); n != ph.signatures {
					t.Errorf("%s: header %q has %d signatures; want %d", ph.name, head, n, ph.signatures)
				}
				// Each receiver holds one secret and checks the same
				// delivery.
				for secret, want := range ph.verifies {
					err := webhook.Verify([]byte(secret), head, body, time.Now(), time.Minute)
					if (err == nil) != want {
						who := "old"
						if secret == newSecret {
							who = "new"
						}
						t.Errorf("%s: a receiver holding only the %s secret: %v; want verified %v", ph.name, who, err, want)
					}
				}
				if err := webhook.VerifyAny([][]byte{[]byte(newSecret), []byte(oldSecret)}, head, body, time.Now(), time.Minute); err != nil {
					t.Errorf("%s: a receiver holding both secrets: %v", ph.name, err)
				}
				if err := webhook.Verify([]byte(otherSecret), head, body, time.Now(), time.Minute); err == nil {
					t.Errorf("%s: a receiver holding another secret verified", ph.name)
				}
			}
		})
	}
}
