//go:build crash

package crashtest

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	mrand "math/rand/v2"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"zombiezen.com/go/sqlite"
	"zombiezen.com/go/sqlite/sqlitex"

	"github.com/jackc/pgx/v5"
	"github.com/syncgo/syncgo/internal/pgtest"
	"github.com/syncgo/syncgo/internal/sspclient"
	"github.com/syncgo/syncgo/pgstore"
	"github.com/syncgo/syncgo/schema"
	"github.com/syncgo/syncgo/sqlitestore"
	"github.com/syncgo/syncgo/store"
	"github.com/syncgo/syncgo/wire"
)

var (
	flagCycles  = flag.Int("cycles", 5, "kill -9 cycles per driver")
	flagDriver  = flag.String("driver", "both", "sqlite, postgres or both")
	flagSeed    = flag.Uint64("seed", 0, "random seed; 0 picks one (printed)")
	flagClients = flag.Int("clients", 6, "concurrent pushing clients")
	flagMaxRun  = flag.Duration("maxrun", 1500*time.Millisecond, "longest push phase before a kill")
)

// crashSchema is the served schema, passed to `syncgo serve -schema`.
const crashSchema = `{
  "version": 1,
  "tables": [
    {
      "name": "tasks",
      "primaryKey": "id",
      "columns": [
        { "name": "id", "type": "string", "nullable": false },
        { "name": "project_id", "type": "string", "nullable": false },
        { "name": "title", "type": "string", "nullable": false },
        { "name": "n", "type": "integer", "nullable": true }
      ],
      "scopes": [ "project:{project_id}" ]
    }
  ]
}`

// partition is the partition of `syncgo serve`'s development
// authentication.
const partition = "default"

func TestCrash(t *testing.T) {
	seed := *flagSeed
	if seed == 0 {
		seed = mrand.Uint64()
	}
	t.Logf("crash suite: seed %d (reproduce the choices with -seed %d), %d cycles, %d clients", seed, seed, *flagCycles, *flagClients)
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("FAILED with seed %d: go test -tags crash ./internal/crashtest -driver %s -cycles %d -clients %d -seed %d",
				seed, *flagDriver, *flagCycles, *flagClients, seed)
		}
	})
	dir := t.TempDir()
	bin := buildServer(t, dir)
	schemaPath := filepath.Join(dir, "schema.json")
	if err := os.WriteFile(schemaPath, []byte(crashSchema), 0o644); err != nil {
		t.Fatal(err)
	}
	drivers := []string{"sqlite", "postgres"}
	if *flagDriver != "both" {
		drivers = []string{*flagDriver}
	}
	for _, d := range drivers {
		t.Run(d, func(t *testing.T) {
			var db string
			var verify verifier
			switch d {
			case "sqlite":
				path := filepath.Join(t.TempDir(), "crash.db")
				db, verify = path, sqliteVerifier(path)
			case "postgres":
				// The server's sessions carry an application name of their
				// own, so that the verifier can wait for them to end.
				base := pgtest.Schema(t, "syncgo_crash", true)
				u, err := url.Parse(base)
				if err != nil {
					t.Fatal(err)
				}
				app := "syncgo_crash_server_" + strconv.FormatUint(seed, 36)
				q := u.Query()
				q.Set("application_name", app)
				u.RawQuery = q.Encode()
				db, verify = u.String(), postgresVerifier{url: base, serverApp: app}
			default:
				t.Fatalf("unknown -driver %q", d)
			}
			h := &harness{t: t, bin: bin, db: db, schemaPath: schemaPath, verify: verify,
				rng: mrand.New(mrand.NewPCG(seed, driverSalt(d)))}
			h.run(seed)
		})
	}
}

func driverSalt(d string) uint64 {
	var s uint64
	for _, c := range d {
		s = s*131 + uint64(c)
	}
	return s
}

// buildServer builds cmd/syncgo into dir.
func buildServer(t *testing.T, dir string) string {
	t.Helper()
	bin := filepath.Join(dir, "syncgo")
	cmd := exec.Command("go", "build", "-o", bin, "github.com/syncgo/syncgo/cmd/syncgo")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return bin
}

// process is one running `syncgo serve`.
type process struct {
	cmd    *exec.Cmd
	addr   string
	logf   string
	exited chan struct{}
}

// start runs `syncgo serve` and waits for its listening line; ready false
// means the caller does not wait (an early kill).
func (h *harness) start(wait bool) (*process, error) {
	h.starts++
	logf := filepath.Join(h.t.TempDir(), fmt.Sprintf("serve-%03d.log", h.starts))
	errFile, err := os.Create(logf)
	if err != nil {
		return nil, err
	}
	defer errFile.Close()
	cmd := exec.Command(h.bin, "serve", "-listen", "127.0.0.1:0", "-db", h.db, "-schema", h.schemaPath)
	cmd.Stderr = errFile
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	p := &process{cmd: cmd, logf: logf, exited: make(chan struct{})}
	addrc := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			if rest, ok := strings.CutPrefix(sc.Text(), "syncgo listening on http://"); ok {
				addr, _, _ := strings.Cut(rest, " ")
				addrc <- addr
			}
		}
		_ = cmd.Wait()
		close(p.exited)
	}()
	if !wait {
		return p, nil
	}
	select {
	case p.addr = <-addrc:
		return p, nil
	case <-p.exited:
		return nil, fmt.Errorf("syncgo serve exited before listening (%s); log:\n%s", cmd.ProcessState, tail(logf))
	case <-time.After(60 * time.Second):
		p.kill()
		return nil, fmt.Errorf("syncgo serve not listening after 60s; log:\n%s", tail(logf))
	}
}

// kill sends SIGKILL and waits for the process to be gone.
func (p *process) kill() {
	_ = p.cmd.Process.Kill()
	<-p.exited
}

func tail(path string) string {
	b, _ := os.ReadFile(path)
	if len(b) > 4000 {
		b = b[len(b)-4000:]
	}
	return string(b)
}

// harness runs the cycles of one driver.
type harness struct {
	t          *testing.T
	bin, db    string
	schemaPath string
	verify     verifier
	rng        *mrand.Rand
	starts     int

	addr atomic.Pointer[string] // the current server's address
}

// dial connects to the current server, whichever process it is.
func (h *harness) dial(ctx context.Context, network, _ string) (net.Conn, error) {
	a := h.addr.Load()
	if a == nil {
		return nil, errors.New("no server")
	}
	var d net.Dialer
	return d.DialContext(ctx, network, *a)
}

func (h *harness) run(seed uint64) {
	t := h.t
	sc, err := schema.ParseJSON([]byte(crashSchema))
	if err != nil {
		t.Fatal(err)
	}
	compiled, err := schema.Compile(sc)
	if err != nil {
		t.Fatal(err)
	}
	hc := &http.Client{Transport: &http.Transport{DialContext: h.dial, MaxIdleConnsPerHost: 64},
		Timeout: 20 * time.Second}
	workers := make([]*worker, *flagClients)
	for i := range workers {
		name := fmt.Sprintf("w%d", i)
		c, err := sspclient.New("http://syncgo.crash", "actor-"+name, compiled,
			sspclient.Options{ClientID: "crash-" + name, HTTPClient: hc, MaxOperationsPerRequest: 200})
		if err != nil {
			t.Fatal(err)
		}
		workers[i] = &worker{name: name, c: c, rng: mrand.New(mrand.NewPCG(seed, uint64(i)+1000)), rows: map[string][]string{}}
	}
	var total stats
	log := &logIndex{}
	firstOK := new(atomic.Int64)
	for _, w := range workers {
		w.firstOK = firstOK
	}
	for cycle := 1; cycle <= *flagCycles; cycle++ {
		// An early kill: the process dies while it opens, migrates or
		// just listens, before any client reaches it.
		if h.rng.IntN(8) == 0 {
			p, err := h.start(false)
			if err != nil {
				t.Fatalf("cycle %d: %v", cycle, err)
			}
			time.Sleep(time.Duration(h.rng.IntN(300)) * time.Millisecond)
			p.kill()
			total.earlyKills++
		}
		p, err := h.start(true)
		if err != nil {
			t.Fatalf("cycle %d: %v", cycle, err)
		}
		h.addr.Store(&p.addr)
		ready := time.Now()
		firstOK.Store(0)
		ctx, cancel := context.WithCancel(context.Background())
		var wg sync.WaitGroup
		for _, w := range workers {
			wg.Add(1)
			go func() { defer wg.Done(); w.push(ctx) }()
		}
		run := time.Duration(h.rng.Int64N(int64(*flagMaxRun)))
		time.Sleep(run)
		p.kill()
		cancel()
		wg.Wait()
		hc.CloseIdleConnections()
		s, err := h.verify.check(compiled, workers, log)
		if err != nil {
			t.Fatalf("cycle %d (seed %d): %v\nlast server log:\n%s", cycle, seed, err, tail(p.logf))
		}
		total.kills++
		total.maxSeq = s.maxSeq
		if testing.Verbose() {
			first := "none"
			if ns := firstOK.Load(); ns != 0 {
				first = time.Unix(0, ns).Sub(ready).Round(time.Millisecond).String()
			}
			t.Logf("cycle %d: killed after %v (first push answered after %s): %d commits in the log, %d acknowledged, %d cached replays, %d rejected, %d pending",
				cycle, run.Round(time.Millisecond), first, s.maxSeq-s.horizon, s.acked, s.cached, s.rejected, s.pending)
			for _, w := range workers {
				if w.last != nil {
					t.Logf("  %s: %d failed rounds, last: %v", w.name, w.errs, w.last)
					w.last = nil
				}
			}
		}
	}
	// Recovery: one more start, every outbox drains, and every commit the
	// clients ever queued now has an outcome.
	p, err := h.start(true)
	if err != nil {
		t.Fatalf("final start: %v", err)
	}
	h.addr.Store(&p.addr)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	for _, w := range workers {
		if err := w.drain(ctx); err != nil {
			p.kill()
			t.Fatalf("draining %s: %v\nserver log:\n%s", w.name, err, tail(p.logf))
		}
	}
	p.kill()
	// The final check reads the whole log again, so that it also finds a
	// commit that changed after an earlier check read it.
	s, err := h.verify.check(compiled, workers, &logIndex{final: true})
	if err != nil {
		t.Fatalf("after recovery (seed %d): %v", seed, err)
	}
	t.Logf("%d kills (+%d during startup), %d commits in the log, %d acknowledged, %d answered from the cache after a lost answer, %d rejected; all present exactly once, sequences dense",
		total.kills, total.earlyKills, s.maxSeq-s.horizon, s.acked, s.cached, s.rejected)
	if s.acked == 0 {
		t.Fatal("no commit was acknowledged: the suite exercised nothing")
	}
}

type stats struct {
	kills, earlyKills                int
	maxSeq, horizon                  int64
	acked, cached, rejected, pending int
}

// worker is one client pushing commits in a loop. Its replica (outbox,
// outcomes) lives in this process and survives the server's deaths, like
// a device's database.
type worker struct {
	name string
	c    *sspclient.Client
	rng  *mrand.Rand
	n    int
	// rows are the unique rows each queued commit upserts, by commit id.
	rows map[string][]string
	ids  []string // queued commit ids, in order
	errs int
	last error // the last error of a round, for the verbose log
	// firstOK is set to the time of the first successful round after a
	// start, for the verbose log (shared by the workers).
	firstOK *atomic.Int64
}

// push queues commits and pushes them until ctx ends.
func (w *worker) push(ctx context.Context) {
	for ctx.Err() == nil {
		if _, ok := w.c.LogEpoch(); !ok {
			if _, err := w.c.Sync(ctx); err != nil {
				w.errs++
				w.last = err
				time.Sleep(5 * time.Millisecond)
			}
			continue
		}
		for w.c.Pending() < 30 && w.rng.IntN(4) != 0 {
			w.queue()
		}
		if _, err := w.c.Push(ctx); err != nil {
			w.errs++
			w.last = err
			time.Sleep(time.Duration(1+w.rng.IntN(10)) * time.Millisecond)
		} else {
			w.firstOK.CompareAndSwap(0, time.Now().UnixNano())
		}
	}
}

// queue adds one commit: a unique row (or fifty), and sometimes a write
// of a shared row, unconditional or with a base version that may conflict.
func (w *worker) queue() {
	w.n++
	var unique []string
	id, err := w.c.Mutate(func(tx *sspclient.Tx) error {
		k := 1
		if w.rng.IntN(20) == 0 {
			k = 50
		}
		for j := range k {
			rid := fmt.Sprintf("%s-%d-%d", w.name, w.n, j)
			unique = append(unique, rid)
			if err := tx.Upsert("tasks", map[string]any{"id": rid, "project_id": fmt.Sprintf("p%d", w.rng.IntN(4)),
				"title": "unique", "n": int64(w.n)}); err != nil {
				return err
			}
		}
		switch w.rng.IntN(6) {
		case 0:
			return tx.Upsert("tasks", map[string]any{"id": fmt.Sprintf("shared-%d", w.rng.IntN(5)), "project_id": "p0",
				"title": "versioned by " + w.name, "n": int64(w.n)}, sspclient.BaseVersion(1+w.rng.Int64N(8)))
		case 1:
			return tx.Upsert("tasks", map[string]any{"id": fmt.Sprintf("shared-%d", w.rng.IntN(5)), "project_id": "p1",
				"title": "blind by " + w.name, "n": int64(w.n)})
		}
		return nil
	})
	if err != nil {
		panic(err) // a local encoding error: a bug of this test
	}
	w.rows[id] = unique
	w.ids = append(w.ids, id)
}

// drain pushes until the outbox is empty.
func (w *worker) drain(ctx context.Context) error {
	for w.c.Pending() > 0 || !hasEpoch(w.c) {
		var err error
		if !hasEpoch(w.c) {
			_, err = w.c.Sync(ctx)
		} else {
			_, err = w.c.Push(ctx)
		}
		if err != nil {
			if ctx.Err() != nil {
				return err
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	return nil
}

func hasEpoch(c *sspclient.Client) bool { _, ok := c.LogEpoch(); return ok }

// verifier reads the database of a dead server and checks the invariants.
type verifier interface {
	check(sc *schema.Compiled, workers []*worker, log *logIndex) (stats, error)
}

type sqliteVerifier string

func (v sqliteVerifier) check(sc *schema.Compiled, workers []*worker, log *logIndex) (stats, error) {
	if err := integrityCheck(string(v)); err != nil {
		return stats{}, err
	}
	ctx := context.Background()
	st, err := sqlitestore.Open(ctx, sqlitestore.Config{Path: string(v), ReadOnly: true})
	if err != nil {
		return stats{}, fmt.Errorf("open the database after the kill: %w", err)
	}
	defer st.Close()
	return checkLog(ctx, st, sc, workers, log)
}

// integrityCheck runs PRAGMA integrity_check on the file, as the next
// process would find it (the WAL included).
func integrityCheck(path string) error {
	conn, err := sqlite.OpenConn(path, sqlite.OpenReadWrite)
	if err != nil {
		return fmt.Errorf("integrity_check: open: %w", err)
	}
	defer conn.Close()
	var res []string
	err = sqlitex.ExecuteTransient(conn, "PRAGMA integrity_check", &sqlitex.ExecOptions{
		ResultFunc: func(stmt *sqlite.Stmt) error { res = append(res, stmt.ColumnText(0)); return nil }})
	if err != nil {
		return fmt.Errorf("integrity_check: %w", err)
	}
	if len(res) != 1 || res[0] != "ok" {
		return fmt.Errorf("PRAGMA integrity_check: %q", res)
	}
	return nil
}

// postgresVerifier checks a Postgres database once the killed server's
// sessions are gone: a transaction whose COMMIT the server had sent before
// it died still commits, in its backend, after the kill.
type postgresVerifier struct {
	url, serverApp string
}

func (v postgresVerifier) check(sc *schema.Compiled, workers []*worker, log *logIndex) (stats, error) {
	ctx := context.Background()
	if err := v.settle(ctx); err != nil {
		return stats{}, err
	}
	st, err := pgstore.Open(ctx, pgstore.Config{URL: v.url, ReadOnly: true, MaxConns: 2})
	if err != nil {
		return stats{}, fmt.Errorf("open the database after the kill: %w", err)
	}
	defer st.Close()
	return checkLog(ctx, st, sc, workers, log)
}

// settle waits until no session of the killed server is left.
func (v postgresVerifier) settle(ctx context.Context) error {
	conn, err := pgx.Connect(ctx, v.url)
	if err != nil {
		return fmt.Errorf("connect after the kill: %w", err)
	}
	defer conn.Close(ctx)
	deadline := time.Now().Add(30 * time.Second)
	for {
		var n int
		if err := conn.QueryRow(ctx, "SELECT count(*) FROM pg_stat_activity WHERE application_name = $1", v.serverApp).Scan(&n); err != nil {
			return fmt.Errorf("the killed server's sessions: %w", err)
		}
		if n == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%d sessions of the killed server still open after 30 s", n)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// logKey names a commit by its client.
type logKey struct{ client, commit string }

// logIndex is what the checks have read of the log so far. Each check
// after a kill reads only the commits past those it read before, so a
// long run costs the same per cycle at its end as at its start (a check
// that reread the whole log made long runs quadratic). A logged commit
// never changes; the final check starts from an empty index and reads
// the whole log once more.
type logIndex struct {
	final   bool
	horizon int64
	next    int64 // the next sequence to read; 0 before the first read
	inLog   map[logKey][]int64
	rows    map[string]int // how often each unique row is written in the log
}

// reset empties the index, to read the log from the partition's horizon.
func (l *logIndex) reset(horizon int64) {
	l.horizon, l.next = horizon, horizon+1
	l.inLog, l.rows = map[logKey][]int64{}, map[string]int{}
}

// checkLog checks the partition's log against the clients' outcomes:
//   - sequences are dense from the horizon to the partition's maximum;
//   - a commit acknowledged as applied or cached is in the log exactly
//     once, at the sequence it was acknowledged with, under its client;
//   - a rejected commit is not in the log; a commit without an outcome yet
//     (its answer was lost) is in it at most once;
//   - every commit in the log was queued by a client;
//   - the unique rows of the tasks table are exactly those of the commits
//     in the log.
//
// It reads the commits past those that log holds and adds them to it. A
// final check also requires that every queued commit has an outcome.
func checkLog(ctx context.Context, st store.Store, sc *schema.Compiled, workers []*worker, log *logIndex) (stats, error) {
	var s stats
	final := log.final
	if err := st.EnsureSchema(ctx, sc); err != nil {
		return s, fmt.Errorf("the stored schema after the kill: %w", err)
	}
	part, err := st.Partition(ctx, partition)
	if errors.Is(err, store.ErrNotFound) {
		part, err = store.Partition{}, nil // nothing reached the server yet
	}
	if err != nil {
		return s, fmt.Errorf("partition: %w", err)
	}
	s.maxSeq, s.horizon = part.MaxCommitSeq, part.HorizonSeq
	if log.next == 0 || log.horizon != part.HorizonSeq {
		log.reset(part.HorizonSeq)
	}
	if part.MaxCommitSeq < log.next-1 {
		return s, fmt.Errorf("the partition says %d, but the log held commits up to %d before", part.MaxCommitSeq, log.next-1)
	}
	type key = logKey
	inLog, logRows := log.inLog, log.rows
	for after := log.next - 1; ; {
		cs, err := st.ReadCommits(ctx, partition, after, 1<<62, 1000)
		if err != nil {
			return s, fmt.Errorf("ReadCommits after %d: %w", after, err)
		}
		if len(cs) == 0 {
			break
		}
		for _, c := range cs {
			if c.Seq != log.next {
				return s, fmt.Errorf("commit sequences are not dense: %d follows %d", c.Seq, log.next-1)
			}
			log.next++
			k := key{c.ClientID, c.ClientCommitID}
			inLog[k] = append(inLog[k], c.Seq)
			for _, ch := range c.Changes {
				if !strings.HasPrefix(ch.RowID, "shared-") {
					logRows[ch.RowID]++
				}
			}
		}
		after = cs[len(cs)-1].Seq
	}
	if log.next-1 != part.MaxCommitSeq {
		return s, fmt.Errorf("the log ends at %d, the partition says %d", log.next-1, part.MaxCommitSeq)
	}
	known := map[key]bool{}
	for _, w := range workers {
		outcomes := map[string]sspclient.Outcome{}
		for _, o := range w.c.Outcomes() {
			if _, dup := outcomes[o.CommitID]; dup {
				return s, fmt.Errorf("%s: commit %s has two outcomes", w.name, o.CommitID)
			}
			outcomes[o.CommitID] = o
		}
		for _, id := range w.ids {
			k := key{w.c.ClientID(), id}
			known[k] = true
			seqs := inLog[k]
			below := false // acknowledged below the horizon: pruned, not observable
			o, has := outcomes[id]
			switch {
			case !has:
				s.pending++
				if final {
					return s, fmt.Errorf("%s: commit %s never got an outcome", w.name, id)
				}
				if len(seqs) > 1 {
					return s, fmt.Errorf("%s: unacknowledged commit %s applied %d times (seqs %v)", w.name, id, len(seqs), seqs)
				}
			case o.Status == wire.PushApplied || o.Status == wire.PushCached:
				s.acked++
				if o.Status == wire.PushCached {
					s.cached++
				}
				below = o.CommitSeq <= part.HorizonSeq
				if !below && !slices.Equal(seqs, []int64{o.CommitSeq}) {
					return s, fmt.Errorf("%s: commit %s acknowledged (%v) at seq %d, but the log holds it at %v",
						w.name, id, o.Status, o.CommitSeq, seqs)
				}
			case o.Status == wire.PushRejected:
				s.rejected++
				if len(seqs) != 0 {
					return s, fmt.Errorf("%s: commit %s rejected (%s), but the log holds it at %v", w.name, id, o.ErrorCode(), seqs)
				}
			default:
				return s, fmt.Errorf("%s: commit %s has outcome %+v", w.name, id, o)
			}
			if len(seqs) == 1 && !below {
				for _, r := range w.rows[id] {
					if logRows[r] != 1 {
						return s, fmt.Errorf("%s: row %s of commit %s is written %d times in the log", w.name, r, id, logRows[r])
					}
				}
			}
		}
	}
	for k, seqs := range inLog {
		if !known[k] {
			return s, fmt.Errorf("the log holds commit %s of client %s at %v, which no client queued", k.commit, k.client, seqs)
		}
	}
	// The table holds exactly the unique rows the log wrote (none is
	// deleted by this suite).
	if part.HorizonSeq == 0 {
		n := 0
		var after *string
		for {
			rows, err := st.ListRows(ctx, partition, "tasks", after, 1000)
			if errors.Is(err, store.ErrNotFound) {
				break
			}
			if err != nil {
				return s, fmt.Errorf("ListRows: %w", err)
			}
			for _, r := range rows {
				if strings.HasPrefix(r.RowID, "shared-") {
					continue
				}
				n++
				if logRows[r.RowID] != 1 {
					return s, fmt.Errorf("row %s is in the table but written %d times in the log", r.RowID, logRows[r.RowID])
				}
			}
			if len(rows) < 1000 {
				break
			}
			after = &rows[len(rows)-1].RowID
		}
		if n != len(logRows) {
			return s, fmt.Errorf("the table holds %d unique rows, the log wrote %d", n, len(logRows))
		}
	}
	return s, nil
}
