package main

import (
	"context"
	crand "crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/syncgo/syncgo/internal/sspclient"
	"github.com/syncgo/syncgo/schema"
)

type config struct {
	bin, db, secret, out string
	urls                 []string
	instances            int
	duration, think      time.Duration
	clients, tenants     int
	projects             int
	sockets              float64
	reinstall, faults    bool
	killEvery            time.Duration
	killAll              bool
	terminateEvery       time.Duration
	dropEvery            time.Duration
	pgRestart, pgCluster string
	deployAt             time.Duration
	settle, quiet        time.Duration
	seed                 int64
}

func (c *config) defaults() {
	def := func(d *time.Duration, v time.Duration) {
		if *d == 0 {
			*d = v
		}
	}
	def(&c.duration, 5*time.Minute)
	def(&c.think, 500*time.Millisecond)
	def(&c.killEvery, 90*time.Second)
	def(&c.terminateEvery, 45*time.Second)
	def(&c.dropEvery, 10*time.Second)
	def(&c.settle, 3*time.Minute)
	def(&c.quiet, 15*time.Second)
	c.instances = max(c.instances, 1)
	c.tenants = max(c.tenants, 1)
	c.projects = max(c.projects, 2)
	c.clients = max(c.clients, 1)
}

// fault is one injected fault.
type fault struct {
	At     time.Duration `json:"at"`
	Kind   string        `json:"kind"`
	Detail string        `json:"detail,omitempty"`
	Wall   string        `json:"wall"`
}

// statusEvent is one HTTP error answer a client received.
// errEvent is a client error that carried no HTTP status: a refused or
// reset connection, a response cut short, a timeout.
type errEvent struct {
	At   time.Duration
	Kind string
}

// maxErrEvents bounds the transport errors kept with their times.
const maxErrEvents = 10000

type statusEvent struct {
	At     time.Duration
	Status int
	Msg    string
}

// run is the state of one soak.
type run struct {
	cfg     config
	secret  string
	seed    int64
	schema  *schema.Compiled
	http    *http.Client
	start   time.Time
	insts   []*instance
	clients []*vclient

	mu         sync.Mutex
	faults     []fault
	statuses   []statusEvent
	errKinds   map[string]int // client errors by kind
	errEvents  []errEvent     // client errors without an HTTP status, in order (at most maxErrEvents)
	violations []string
	samples    []sample
	auditors   map[string]*sspclient.Client // by tenant
	schemaPath string                       // version 1's file, the processes' schema at start
	reinstalls atomic.Int64
	log        io.Writer
}

func (r *run) url(i int) string {
	if len(r.cfg.urls) > 0 {
		return r.cfg.urls[i%len(r.cfg.urls)]
	}
	return r.insts[i%len(r.insts)].url
}

func (r *run) servers() int {
	if len(r.cfg.urls) > 0 {
		return len(r.cfg.urls)
	}
	return len(r.insts)
}

func (r *run) violation(format string, args ...any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.violations = append(r.violations, fmt.Sprintf(format, args...))
}

func (r *run) noteStatus(status int, msg string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.statuses = append(r.statuses, statusEvent{At: time.Since(r.start), Status: status, Msg: msg})
}

// noteErr counts a client error by its kind: the message without its
// numbers and addresses.
func (r *run) noteErr(err error) {
	msg := err.Error()
	if i := strings.LastIndex(msg, ": "); i >= 0 && strings.Contains(msg, "127.0.0.1") {
		msg = msg[i+2:] // "dial tcp 127.0.0.1:…: connect: connection refused"
	}
	msg = strings.Map(func(c rune) rune {
		if c >= '0' && c <= '9' {
			return '#'
		}
		return c
	}, msg)
	if len(msg) > 120 {
		msg = msg[:120]
	}
	var he *sspclient.HTTPError
	r.mu.Lock()
	r.errKinds[msg]++
	if !errors.As(err, &he) && !errors.Is(err, context.Canceled) && len(r.errEvents) < maxErrEvents {
		r.errEvents = append(r.errEvents, errEvent{At: time.Since(r.start), Kind: msg})
	}
	r.mu.Unlock()
}

func (r *run) noteFault(kind, detail string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	f := fault{At: time.Since(r.start).Round(time.Millisecond), Kind: kind, Detail: detail, Wall: time.Now().UTC().Format(time.RFC3339)}
	r.faults = append(r.faults, f)
	fmt.Fprintf(r.log, "soak: %s fault %s %s\n", f.At.Round(time.Second), kind, detail)
}

func (r *run) logf(format string, args ...any) {
	fmt.Fprintf(r.log, "soak: %s "+format+"\n", append([]any{time.Since(r.start).Round(time.Second)}, args...)...)
}

// soak runs the whole soak and returns its report.
func soak(ctx context.Context, cfg config, logw io.Writer) (*report, error) {
	sc, err := compileSchema(soakSchema)
	if err != nil {
		return nil, err
	}
	r := &run{cfg: cfg, secret: cfg.secret, seed: cfg.seed, schema: sc, http: httpClient(), log: logw, start: time.Now(),
		auditors: map[string]*sspclient.Client{}, errKinds: map[string]int{}}
	if cfg.out == "" {
		if r.cfg.out, err = os.MkdirTemp("", "soak-"); err != nil {
			return nil, err
		}
	}
	if err := os.MkdirAll(r.cfg.out, 0o755); err != nil {
		return nil, err
	}
	if isPostgres(cfg.db) {
		if r.cfg.db, err = tagDB(cfg.db); err != nil {
			return nil, err
		}
	}
	if cfg.bin != "" {
		r.schemaPath = filepath.Join(r.cfg.out, "schema.json")
		if err := os.WriteFile(r.schemaPath, soakSchema, 0o644); err != nil {
			return nil, err
		}
		for i := range cfg.instances {
			name := fmt.Sprintf("s%d", i)
			in, err := newInstance(name, cfg.bin, filepath.Join(r.cfg.out, name), r.cfg.db, r.schemaPath, cfg.secret)
			if err != nil {
				return nil, err
			}
			r.insts = append(r.insts, in)
		}
		defer func() {
			for _, in := range r.insts {
				in.kill(syscall.SIGTERM)
			}
		}()
		for _, in := range r.insts {
			if err := in.start(ctx); err != nil {
				return nil, err
			}
		}
	}
	r.logf("servers: %s; logs under %s", strings.Join(r.serverURLs(), " "), r.cfg.out)
	r.makeClients()

	loadCtx, stopLoad := context.WithCancel(ctx)
	sockCtx, stopSockets := context.WithCancel(ctx)
	defer stopSockets()
	var load, socks sync.WaitGroup
	for _, v := range r.clients {
		load.Go(func() { v.loop(loadCtx, cfg.think) })
		if v.socket {
			socks.Go(func() { v.socketLoop(sockCtx) })
		}
	}
	sampCtx, stopSampling := context.WithCancel(ctx)
	var sampling sync.WaitGroup
	sampling.Go(func() { r.sampleLoop(sampCtx) })
	faultCtx, stopFaults := context.WithCancel(ctx)
	var faulting sync.WaitGroup
	if cfg.faults {
		faulting.Go(func() { r.faultLoop(faultCtx) })
	}
	progress := time.NewTicker(30 * time.Second)
	deadline := time.After(cfg.duration)
wait:
	for {
		select {
		case <-ctx.Done():
			break wait
		case <-deadline:
			break wait
		case <-progress.C:
			r.logProgress()
		}
	}
	progress.Stop()
	stopFaults()
	faulting.Wait()
	r.logf("load and faults stop; outboxes drain, then %s of quiet for the sockets", cfg.quiet)
	stopLoad()
	load.Wait()
	if ctx.Err() != nil {
		stopSampling()
		return nil, ctx.Err()
	}
	for _, in := range r.insts {
		if err := in.start(ctx); err != nil { // a process a fault left down
			stopSampling()
			return nil, err
		}
	}
	r.drainOutboxes(ctx)
	sleep(ctx, cfg.quiet)
	r.checkRealtime(ctx)
	stopSockets()
	socks.Wait()
	r.settle(ctx)
	stopSampling()
	sampling.Wait()
	rep := r.check(ctx)
	return rep, nil
}

func (r *run) serverURLs() []string {
	var out []string
	for i := range r.servers() {
		out = append(out, r.url(i))
	}
	return out
}

// makeClients spreads the clients over tenants and servers, and grants
// each two projects of its tenant (one when the tenant has two), leaving
// another as the forbidden one it writes to and, for every third client,
// one it subscribes to without a grant.
func (r *run) makeClients() {
	rng := rand.New(rand.NewPCG(uint64(r.seed), 7))
	for i := range r.cfg.clients {
		t := i % r.cfg.tenants
		perm := rng.Perm(r.cfg.projects)
		granted := 2
		if r.cfg.projects <= 2 {
			granted = 1
		}
		v := &vclient{r: r, idx: i, actor: fmt.Sprintf("u%d", i), tenant: fmt.Sprintf("t%d", t),
			inst: (i / r.cfg.tenants) % r.servers(), marks: map[string]string{}, forbid: map[string]bool{}}
		for _, p := range perm[:granted] {
			v.projects = append(v.projects, project(t, p))
		}
		v.forbidden = project(t, perm[granted])
		if i%3 == 0 && r.cfg.projects > granted+1 {
			v.spy = project(t, perm[granted+1])
		}
		v.socket = rng.Float64() < r.cfg.sockets
		c, err := v.newReplica()
		if err != nil {
			panic(err) // the soak schema declares what newReplica subscribes to
		}
		v.c = c
		r.clients = append(r.clients, v)
	}
}

func project(tenant, p int) string { return fmt.Sprintf("t%d-p%d", tenant, p) }

func (r *run) logProgress() {
	var rounds, deltas, errs, queued int64
	for _, v := range r.clients {
		rounds += v.rounds.Load()
		deltas += v.deltas.Load()
		errs += v.errs.Load()
		v.mu.Lock()
		queued += int64(v.n)
		v.mu.Unlock()
	}
	r.mu.Lock()
	var last string
	if n := len(r.samples); n > 0 {
		for _, s := range r.samples[max(0, n-len(r.insts)):] {
			last += fmt.Sprintf(" %s#%d rss=%dMiB g=%d", s.Instance, s.Start, s.RSSKiB/1024, s.Goroutines)
		}
	}
	nf := len(r.faults)
	r.mu.Unlock()
	r.logf("commits queued %d, rounds %d, deltas applied %d, client errors %d, faults %d;%s", queued, rounds, deltas, errs, nf, last)
}

// sampleLoop samples every process every 10 s.
func (r *run) sampleLoop(ctx context.Context) {
	t := time.NewTicker(10 * time.Second)
	defer t.Stop()
	for {
		for _, in := range r.insts {
			if s, ok := in.sample(r.start); ok {
				r.mu.Lock()
				r.samples = append(r.samples, s)
				r.mu.Unlock()
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// deploy rolls every process to schema version 2 (soakSchemaV2), with
// version 1 in its schema window, one at a time: SIGTERM (a graceful
// stop after shutdownDelay), start on the new configuration, 5 s before
// the next. The first
// process of version 2 migrates the database at its start and raises the
// writer fences, so the processes still on version 1 refuse writes
// (sync.schema_not_ready, retryable) until they are rolled; the clients
// stay at version 1, served through the window.
func (r *run) deploy(ctx context.Context) {
	v2, err := soakSchemaV2()
	if err != nil {
		r.violation("deploy: %v", err)
		return
	}
	path := filepath.Join(r.cfg.out, "schema-v2.json")
	if err := os.WriteFile(path, v2, 0o644); err != nil {
		r.violation("deploy: %v", err)
		return
	}
	for i, in := range r.insts {
		if i > 0 {
			sleep(ctx, 5*time.Second)
		}
		r.noteFault("deploy", fmt.Sprintf("%s: SIGTERM (shutdown_delay %s), start at schema version 2", in.name, shutdownDelay))
		t0 := time.Now()
		in.kill(syscall.SIGTERM)
		stopped := time.Since(t0)
		if err := in.writeConfig(path, r.schemaPath); err != nil {
			r.violation("deploy %s: %v", in.name, err)
			return
		}
		if err := in.start(context.WithoutCancel(ctx)); err != nil {
			r.violation("deploy %s: start at schema version 2: %v", in.name, err)
			return
		}
		r.noteFault("deployed", fmt.Sprintf("%s: stopped in %s, ready in %s", in.name, stopped.Round(time.Millisecond), (time.Since(t0)-stopped).Round(time.Millisecond)))
	}
}

// soakSchemaV2 is the soak schema at version 2: items gains a nullable
// column, which the migration appends to every stored row and logged
// upsert of it.
func soakSchemaV2() ([]byte, error) {
	var doc map[string]any
	if err := json.Unmarshal(soakSchema, &doc); err != nil {
		return nil, err
	}
	doc["version"] = 2
	tables, _ := doc["tables"].([]any)
	for _, t := range tables {
		if t, ok := t.(map[string]any); ok && t["name"] == "items" {
			cols, _ := t["columns"].([]any)
			t["columns"] = append(cols, map[string]any{"name": "note", "type": "string", "nullable": true})
			return json.MarshalIndent(doc, "", "  ")
		}
	}
	return nil, errors.New("the soak schema has no table items")
}

// faultLoop injects the faults until ctx ends.
func (r *run) faultLoop(ctx context.Context) {
	rng := rand.New(rand.NewPCG(uint64(r.seed), 11))
	pg := isPostgres(r.cfg.db)
	tick := func(d time.Duration) <-chan time.Time {
		if d < 0 {
			return nil
		}
		return time.NewTicker(d).C
	}
	var kills <-chan time.Time
	if len(r.insts) > 0 {
		kills = tick(r.cfg.killEvery)
	}
	drops := tick(r.cfg.dropEvery)
	var terms <-chan time.Time
	if pg {
		terms = tick(r.cfg.terminateEvery)
	}
	var restarts []<-chan time.Time
	if pg && r.cfg.pgRestart != "" {
		for _, s := range strings.Split(r.cfg.pgRestart, ",") {
			d, err := time.ParseDuration(strings.TrimSpace(s))
			if err != nil {
				r.violation("-pg-restart %q: %v", s, err)
				continue
			}
			restarts = append(restarts, time.After(d-time.Since(r.start)))
		}
	}
	var deploy <-chan time.Time
	if len(r.insts) > 0 && r.cfg.deployAt > 0 {
		deploy = time.After(r.cfg.deployAt - time.Since(r.start))
	}
	restartAny := func() <-chan time.Time {
		if len(restarts) == 0 {
			return nil
		}
		return restarts[0]
	}
	killN := 0
	for {
		select {
		case <-ctx.Done():
			return
		case <-kills:
			in := r.insts[len(r.insts)-1]
			if r.cfg.killAll {
				in = r.insts[killN%len(r.insts)]
			}
			killN++
			r.noteFault("sigkill", in.name)
			in.kill(syscall.SIGKILL)
			sleep(ctx, time.Duration(500+rng.IntN(2500))*time.Millisecond)
			if err := in.start(context.WithoutCancel(ctx)); err != nil {
				r.violation("restart after SIGKILL: %v", err)
			} else {
				r.noteFault("restarted", in.name)
			}
		case <-terms:
			n, err := r.terminateBackends(ctx)
			if err != nil {
				r.logf("pg_terminate_backend: %v", err)
				continue
			}
			r.noteFault("pg_terminate_backend", fmt.Sprintf("%d backends", n))
		case <-drops:
			n := 0
			for _, v := range r.clients {
				if rng.IntN(10) == 0 && v.dropSocket() {
					n++
				}
			}
			r.noteFault("socket_drop", fmt.Sprintf("%d sockets", n))
		case <-deploy:
			r.deploy(ctx)
		case <-restartAny():
			restarts = restarts[1:]
			r.restartPostgres(ctx)
		}
	}
}

// terminateBackends runs pg_terminate_backend on the connections of the
// soak's processes (their application_name, see tagDB), and on nobody
// else's.
func (r *run) terminateBackends(ctx context.Context) (int, error) {
	u, err := url.Parse(r.cfg.db)
	if err != nil {
		return 0, err
	}
	app := u.Query().Get("application_name")
	q := u.Query()
	q.Del("application_name")
	q.Del("search_path")
	u.RawQuery = q.Encode()
	conn, err := pgx.Connect(ctx, u.String())
	if err != nil {
		return 0, err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	var n int
	err = conn.QueryRow(ctx, `SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity
 WHERE datname = current_database() AND application_name = $1 AND pid <> pg_backend_pid()`, app).Scan(&n)
	return n, err
}

// tagDB gives a Postgres URL an application_name of its own (unless it
// has one), by which terminateBackends finds the soak's connections.
func tagDB(db string) (string, error) {
	u, err := url.Parse(db)
	if err != nil {
		return "", err
	}
	q := u.Query()
	if q.Get("application_name") == "" {
		var b [4]byte
		_, _ = crand.Read(b[:])
		q.Set("application_name", "syncgo-soak-"+hex.EncodeToString(b[:]))
	}
	u.RawQuery = q.Encode()
	return u.String(), nil
}

func (r *run) restartPostgres(ctx context.Context) {
	ver := r.cfg.pgCluster
	if ver == "" {
		ents, err := os.ReadDir("/etc/postgresql")
		if err != nil || len(ents) != 1 {
			r.logf("pg restart: cannot tell the cluster (give -pg-cluster)")
			return
		}
		ver = ents[0].Name()
	}
	r.noteFault("pg_restart", "pg_ctlcluster "+ver+" main restart")
	t0 := time.Now()
	out, err := exec.CommandContext(ctx, "pg_ctlcluster", "--skip-systemctl-redirect", ver, "main", "restart").CombinedOutput()
	if err != nil {
		r.logf("pg restart: %v: %s", err, out)
		return
	}
	r.noteFault("pg_restarted", fmt.Sprintf("in %s", time.Since(t0).Round(time.Millisecond)))
}

// drainOutboxes pushes every client's outbox (push-only requests: the
// replicas learn of these commits, and of each other's, through their
// sockets alone until settle).
func (r *run) drainOutboxes(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, r.cfg.settle)
	defer cancel()
	var wg sync.WaitGroup
	sem := make(chan struct{}, 16)
	for _, v := range r.clients {
		wg.Go(func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			c := v.client()
			for c.Pending() > 0 && ctx.Err() == nil {
				rctx, rcancel := context.WithTimeout(ctx, 30*time.Second)
				_, err := c.Push(rctx)
				rcancel()
				if errors.Is(err, sspclient.ErrNoEpoch) {
					v.round(ctx, c)
				} else if err != nil {
					v.note(err)
					sleep(ctx, time.Second)
				}
			}
		})
	}
	wg.Wait()
}

// checkRealtime compares, once the outboxes drained and the sockets had
// the quiet period to deliver, the replicas of the clients with a socket
// to a fresh bootstrap of their tenant: what the sockets did not bring
// (a delta never sent, a commit never announced to the process holding
// the socket) shows as a difference. The replicas pulled only when their
// socket connected or woke them.
func (r *run) checkRealtime(ctx context.Context) {
	fresh := map[string]*sspclient.Client{}
	behind, checked := 0, 0
	for _, v := range r.clients {
		if !v.socket {
			continue
		}
		a, ok := fresh[v.tenant]
		if !ok {
			var err error
			if a, err = r.auditor(ctx, v.tenant); err != nil {
				r.violation("tenant %s: bootstrap for the realtime check: %v", v.tenant, err)
			}
			fresh[v.tenant] = a
		}
		if a == nil {
			continue
		}
		checked++
		c := v.client()
		for _, tbl := range []string{"items", "marks"} {
			d := diffRows(c.Rows(tbl), a.Rows(tbl), v.projects)
			diff := slices.Sorted(slices.Values(slices.Concat(d.missing, d.older, d.newer, d.changed, d.extra)))
			if len(diff) > 0 {
				behind++
				var cursors []string
				for _, p := range v.projects {
					if st, ok := c.Subscription(tbl + ":" + p); ok {
						cursors = append(cursors, fmt.Sprintf("%s=%d", st.ID, st.Cursor))
					}
				}
				r.violation("client %s (replica %s, socket on %s): after %s of quiet, %d %s rows differ from the server's: %d missing, %d older, %d newer, %d changed at the same version, %d deleted on the server (e.g. %s); cursors %v",
					v.actor, c.ClientID(), r.url(v.inst), r.cfg.quiet, len(diff), tbl, len(d.missing), len(d.older), len(d.newer), len(d.changed), len(d.extra), diff[0], cursors)
				break
			}
		}
	}
	r.logf("realtime check: %d clients with sockets, %d behind", checked, behind)
}

// settle brings every client up to date once the faults stopped: first
// every outbox is drained, then every replica pulls until quiet (a
// second pass, since the first pass's later pushes reach the earlier
// clients only then).
func (r *run) settle(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, r.cfg.settle)
	defer cancel()
	for pass := range 2 {
		var wg sync.WaitGroup
		sem := make(chan struct{}, 16)
		var failed atomic.Int64
		for _, v := range r.clients {
			wg.Go(func() {
				sem <- struct{}{}
				defer func() { <-sem }()
				c := v.client()
				var err error
				for ctx.Err() == nil {
					rctx, rcancel := context.WithTimeout(ctx, 30*time.Second)
					_, err = c.SyncUntilQuiet(rctx, 200)
					rcancel()
					if err == nil && c.Pending() == 0 {
						return
					}
					v.note(err)
					sleep(ctx, time.Second)
				}
				failed.Add(1)
				r.violation("client %s (replica %s) did not settle (pass %d): pending %d, last error %v", v.actor, c.ClientID(), pass+1, c.Pending(), err)
			})
		}
		wg.Wait()
		r.logf("settle pass %d done (%d clients failed)", pass+1, failed.Load())
	}
}

func sortedKeys[M ~map[string]V, V any](m M) []string {
	ks := make([]string, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	slices.Sort(ks)
	return ks
}
