package cli_test

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"log"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/syncgo/syncgo/internal/binarytest"
	"github.com/syncgo/syncgo/internal/pgtest"
	"github.com/syncgo/syncgo/internal/sspclient"
	"github.com/syncgo/syncgo/wire"
)

// killReceiver is a webhook endpoint that checks every delivery's
// signature with its own HMAC (not webhook.Verify), records the
// deliveries by their Syncgo-Delivery id, and notes two requests of one
// id in flight at once.
type killReceiver struct {
	t      *testing.T
	secret []byte

	mu       sync.Mutex
	total    int
	byID     map[string][]string // Syncgo-Delivery → the body's "id" of each request
	events   map[string]string   // Syncgo-Delivery → the event, as first seen
	tasks    map[string]string   // Syncgo-Delivery → the task of its one change
	inFlight map[string]bool
	overlaps []string
	bad      []string
}

func (r *killReceiver) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	body, _ := io.ReadAll(req.Body)
	id := req.Header.Get("Syncgo-Delivery")
	r.mu.Lock()
	if r.inFlight[id] {
		r.overlaps = append(r.overlaps, id)
	}
	r.inFlight[id] = true
	r.mu.Unlock()
	defer func() {
		r.mu.Lock()
		delete(r.inFlight, id)
		r.mu.Unlock()
	}()
	if err := r.verify(req.Header.Get("Syncgo-Signature"), body); err != nil {
		r.mu.Lock()
		r.bad = append(r.bad, err.Error())
		r.mu.Unlock()
		w.WriteHeader(http.StatusUnauthorized)
		return
	}
	var env struct {
		ID    string          `json:"id"`
		Event json.RawMessage `json:"event"`
	}
	var ev struct {
		Changes []struct {
			RowID string `json:"row_id"`
		} `json:"changes"`
	}
	if json.Unmarshal(body, &env) != nil || json.Unmarshal(env.Event, &ev) != nil || len(ev.Changes) != 1 {
		r.mu.Lock()
		r.bad = append(r.bad, "body "+string(body))
		r.mu.Unlock()
		w.WriteHeader(http.StatusBadRequest)
		return
	}
	// A delivery takes a while: kills land in the middle of some.
	time.Sleep(time.Duration(20+rand.IntN(60)) * time.Millisecond)
	r.mu.Lock()
	defer r.mu.Unlock()
	r.total++
	r.byID[id] = append(r.byID[id], env.ID)
	if prev, ok := r.events[id]; ok && prev != string(env.Event) {
		r.bad = append(r.bad, fmt.Sprintf("delivery %s carried two events:\n%s\n%s", id, prev, env.Event))
	}
	r.events[id] = string(env.Event)
	r.tasks[id] = ev.Changes[0].RowID
}

// verify is the documented scheme written again: t=<unix seconds>,
// v1=<hex HMAC-SHA256 of "<t>.<body>">, within a minute of now.
func (r *killReceiver) verify(header string, body []byte) error {
	var ts, sig string
	for _, part := range strings.Split(header, ",") {
		k, v, _ := strings.Cut(part, "=")
		switch k {
		case "t":
			ts = v
		case "v1":
			sig = v
		}
	}
	sec, err := strconv.ParseInt(ts, 10, 64)
	if err != nil {
		return fmt.Errorf("signature header %q", header)
	}
	if d := time.Since(time.Unix(sec, 0)); d > time.Minute || d < -time.Minute {
		return fmt.Errorf("signature time %s", time.Unix(sec, 0))
	}
	m := hmac.New(sha256.New, r.secret)
	m.Write([]byte(ts + "."))
	m.Write(body)
	got, err := hex.DecodeString(sig)
	if err != nil || !hmac.Equal(got, m.Sum(nil)) {
		return fmt.Errorf("signature %q does not match the body", header)
	}
	return nil
}

// `syncgo serve` with a webhook, killed (SIGKILL) at random moments while
// a client pushes a burst of commits through it: after the restarts every
// accepted commit's event reaches the receiver, signed, under one
// delivery id per event (stable across attempts and processes), never
// twice at the same time, and duplicated only by the kills. On Postgres
// two processes serve one database (a fleet) and are killed in turn.
func TestBinaryWebhooksSurviveKill(t *testing.T) {
	bin := binarytest.Build(t)
	for _, driver := range []string{"sqlite", "postgres"} {
		t.Run(driver, func(t *testing.T) {
			secret := "kill-secret-0123456789abcdef"
			rcv := &killReceiver{t: t, secret: []byte(secret), byID: map[string][]string{}, events: map[string]string{},
				tasks: map[string]string{}, inFlight: map[string]bool{}}
			hs := httptest.NewServer(rcv)
			defer hs.Close()
			dir := t.TempDir()
			cfg := filepath.Join(dir, "syncgo.yaml")
			must(t, os.WriteFile(cfg, []byte(fmt.Sprintf(`listen: 127.0.0.1:0
log:
  level: debug
webhooks:
  - name: task-events
    url: %s/hooks
    tables: [tasks]
    secret: ${HOOK_SECRET}
    timeout: 5s
    max_attempts: 100
`, hs.URL)), 0o600))
			env := []string{"HOOK_SECRET=" + secret}
			args := []string{"-config", cfg, "-admin-listen", "127.0.0.1:0"}
			procs := 1
			if driver == "postgres" {
				args = append(args, "-db", pgtest.Schema(t, "webhookkill", false))
				procs = 2
			}
			var (
				pmu     sync.Mutex
				running = make([]*binarytest.Process, procs)
				all     []*binarytest.Process
				next    atomic.Int64
			)
			start := func(i int) {
				p := binarytest.Serve(t, bin, binarytest.Options{Dir: dir, Env: env, Name: fmt.Sprintf("syncgo serve %d", i)}, args...)
				pmu.Lock()
				running[i] = p
				all = append(all, p)
				pmu.Unlock()
			}
			for i := range procs {
				start(i)
			}
			// The client talks to a proxy that spreads its requests over
			// the live processes (502 while none is).
			proxy := httptest.NewServer(&httputil.ReverseProxy{
				Rewrite: func(pr *httputil.ProxyRequest) {
					pmu.Lock()
					p := running[int(next.Add(1))%procs]
					pmu.Unlock()
					if p == nil {
						p = &binarytest.Process{URL: "http://127.0.0.1:1"}
					}
					u, _ := url.Parse(p.URL)
					pr.SetURL(u)
					pr.Out.URL.Path = pr.In.URL.Path
				},
				ErrorLog: log.New(io.Discard, "", 0),
			})
			defer proxy.Close()
			pu, _ := url.Parse(running[0].URL)
			c, err := sspclient.New(proxy.URL+pu.Path, "alice", schemaDemo(t), sspclient.Options{})
			must(t, err)
			_, err = c.Upsert("projects", map[string]any{"id": "p1", "name": "Home"})
			must(t, err)
			ctx := context.Background()
			retry := func(what string, f func() error) error {
				deadline := time.Now().Add(90 * time.Second)
				for {
					err := f()
					if err == nil {
						return nil
					}
					if time.Now().After(deadline) {
						return fmt.Errorf("%s: %w", what, err)
					}
					time.Sleep(50 * time.Millisecond)
				}
			}
			must(t, retry("first sync", func() error { _, err := c.SyncUntilQuiet(ctx, 10); return err }))

			const commits = 60
			pushed := make(chan struct{})
			go func() {
				defer close(pushed)
				for i := range commits {
					if _, err := c.Upsert("tasks", map[string]any{"id": fmt.Sprintf("t%02d", i), "project_id": "p1",
						"title": "x", "done": false, "notes": nil}); err != nil {
						t.Error(err)
						return
					}
					if err := retry("push", func() error {
						_, err := c.Push(ctx)
						if err == nil && c.Pending() > 0 {
							err = fmt.Errorf("%d commits pending", c.Pending())
						}
						return err
					}); err != nil {
						t.Error(err)
						return
					}
					time.Sleep(40 * time.Millisecond)
				}
			}()
			kills := 0
			for done := false; !done || kills < 3; {
				select {
				case <-pushed:
					done, pushed = true, nil
					continue
				case <-time.After(time.Duration(150+rand.IntN(400)) * time.Millisecond):
					i := rand.IntN(procs)
					pmu.Lock()
					p := running[i]
					running[i] = nil
					pmu.Unlock()
					must(t, p.Cmd.Process.Kill())
					<-p.Exited()
					kills++
					start(i)
				}
			}
			if t.Failed() {
				t.FailNow()
			}
			for _, o := range c.Outcomes() {
				if o.Status != wire.PushApplied && o.Status != wire.PushCached {
					t.Errorf("commit %s: status %v", o.CommitID, o.Status)
				}
			}
			// The leases of the killed processes expire after 30 s (the
			// default lease); then the live processes deliver the rest.
			deadline := time.Now().Add(100 * time.Second)
			for {
				rcv.mu.Lock()
				n := len(rcv.byID)
				rcv.mu.Unlock()
				if n >= commits {
					break
				}
				if time.Now().After(deadline) {
					out, errOut, _ := binarytest.Run(t, bin, nil, "reactions", "list", "-db", dbOf(dir, args), "-state", "all")
					t.Fatalf("%d of %d events delivered after %d kills; reactions:\n%s%s", n, commits, kills, out, errOut)
				}
				time.Sleep(100 * time.Millisecond)
			}
			// Events delivered by a process killed before it recorded the
			// completion are delivered again once their lease expired:
			// wait until every reaction completed.
			for {
				out, errOut, code := binarytest.Run(t, bin, nil, "reactions", "backlog", "-db", dbOf(dir, args))
				if code == 0 && strings.Contains(out, "pending: 0\nrunning: 0\ndead letters: 0\n") {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("reactions backlog: exit %d\n%s%s", code, out, errOut)
				}
				time.Sleep(200 * time.Millisecond)
			}
			rcv.mu.Lock()
			defer rcv.mu.Unlock()
			if len(rcv.bad) > 0 || len(rcv.overlaps) > 0 {
				t.Errorf("bad deliveries %q; two at once: %q", rcv.bad, rcv.overlaps)
			}
			seen := map[string]bool{}
			for id, bodyIDs := range rcv.byID {
				sum := sha256.Sum256([]byte(bodyIDs[0]))
				if hex.EncodeToString(sum[:]) != id {
					t.Errorf("Syncgo-Delivery %s is not the SHA-256 of the body's id %s", id, bodyIDs[0])
				}
				for _, b := range bodyIDs[1:] {
					if b != bodyIDs[0] {
						t.Errorf("delivery %s: ids %q differ between attempts", id, bodyIDs)
					}
				}
				seen[rcv.tasks[id]] = true
			}
			for i := range commits {
				if !seen[fmt.Sprintf("t%02d", i)] {
					t.Errorf("the event of task t%02d was never delivered", i)
				}
			}
			// A duplicate needs a process to die between the answer and
			// the completion: at most one per running handler (4 per
			// process) per kill.
			if dups := rcv.total - len(rcv.byID); dups > 4*kills {
				t.Errorf("%d duplicate deliveries after %d kills; at most %d expected", dups, kills, 4*kills)
			}
			t.Logf("%d kills, %d events, %d deliveries", kills, len(rcv.byID), rcv.total)
			for _, p := range all {
				if strings.Contains(p.Stderr.String(), secret) || strings.Contains(p.Stdout.String(), secret) {
					t.Errorf("the webhook secret is in a process's output")
				}
			}
		})
	}
}

func dbOf(dir string, args []string) string {
	if args[len(args)-2] == "-db" {
		return args[len(args)-1]
	}
	return filepath.Join(dir, "syncgo.db")
}
