package sqlitechoice

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
)

// The benchmark bodies are shared by the test binaries of this module (one per
// set of drivers that can be linked together); each binary's bench_test.go
// calls them once per driver as sub-benchmarks.

const partition = "default"

// tmpRoot is where RunMain puts the databases that are kept across
// sub-benchmark runs (the pre-filled read database). It must be on a real
// disk (not tmpfs) for the fsync figures to mean anything: set TMPDIR.
var tmpRoot string

// RunMain wraps testing.M.Run with a temporary directory for long-lived
// databases.
func RunMain(m *testing.M) int {
	dir, err := os.MkdirTemp("", "sqlitechoice-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	tmpRoot = dir
	defer os.RemoveAll(dir)
	return m.Run()
}

func newDB(tb testing.TB, d Driver) (Conn, *Appender) {
	tb.Helper()
	c, err := OpenConfigured(d, filepath.Join(tb.TempDir(), "bench.db"))
	if err != nil {
		tb.Fatal(err)
	}
	if err := CreateSchema(c, partition); err != nil {
		c.Close()
		tb.Fatal(err)
	}
	a, err := NewAppender(c)
	if err != nil {
		c.Close()
		tb.Fatal(err)
	}
	tb.Cleanup(func() {
		a.Close()
		if err := c.Close(); err != nil {
			tb.Error(err)
		}
	})
	return c, a
}

// BenchAppend measures durable commits/s of one writer, each commit in its
// own transaction, nops operations per commit.
func BenchAppend(b *testing.B, d Driver, nops int) {
	_, a := newDB(b, d)
	commits := make([]*Commit, b.N)
	for i := range commits {
		commits[i] = MakeCommit(partition, "client", int64(i), nops)
	}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if _, err := a.CommitOne(commits[i]); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "commits/s")
}

// BenchGroupCommit measures durable commits/s with submitters concurrent
// clients feeding one GroupWriter (batches of at most maxBatch commits).
func BenchGroupCommit(b *testing.B, d Driver, submitters, maxBatch, nops int) {
	_, a := newDB(b, d)
	g := NewGroupWriter(a, maxBatch)
	var next atomic.Int64
	var failed atomic.Value
	var wg sync.WaitGroup
	b.ResetTimer()
	for s := 0; s < submitters; s++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			client := "client" + strconv.Itoa(s)
			for {
				n := next.Add(1)
				if n > int64(b.N) {
					return
				}
				if _, err := g.Submit(MakeCommit(partition, client, n, nops)); err != nil {
					failed.Store(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	b.StopTimer()
	g.Close()
	if err, _ := failed.Load().(error); err != nil {
		b.Fatal(err)
	}
	if g.Commits != int64(b.N) {
		b.Fatalf("committed %d of %d", g.Commits, b.N)
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "commits/s")
	b.ReportMetric(float64(g.Commits)/float64(g.Batches), "commits/batch")
}

// BenchApplyNoSync measures the CPU ceiling of the group-commit path: the
// same batches of 32 commits, each in its own savepoint, but with
// synchronous=OFF (no fsync) and without the channel hand-off. The group
// commit rate cannot exceed this however fast the disk is.
func BenchApplyNoSync(b *testing.B, d Driver) {
	c, a := newDB(b, d)
	if err := c.Exec("PRAGMA synchronous=OFF"); err != nil {
		b.Fatal(err)
	}
	commits := make([]*Commit, b.N)
	for i := range commits {
		commits[i] = MakeCommit(partition, "client", int64(i), 1)
	}
	g := &GroupWriter{a: a}
	batch := make([]*request, 0, 32)
	b.ResetTimer()
	for i := 0; i < b.N; i += 32 {
		batch = batch[:0]
		for j := i; j < i+32 && j < b.N; j++ {
			batch = append(batch, &request{c: commits[j]})
		}
		g.flush(batch)
		for _, r := range batch {
			if r.err != nil {
				b.Fatal(r.err)
			}
		}
	}
	b.StopTimer()
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "commits/s")
}

// BenchRawTx measures the physical limit: tiny transactions (BEGIN
// IMMEDIATE; INSERT one row into a one-column table; COMMIT) with
// synchronous=FULL, i.e. the WAL fsync rate of the disk through the driver.
func BenchRawTx(b *testing.B, d Driver) {
	c, err := OpenConfigured(d, filepath.Join(b.TempDir(), "raw.db"))
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	if err := c.Exec(`CREATE TABLE raw(x INTEGER)`); err != nil {
		b.Fatal(err)
	}
	var sts [3]Stmt
	for i, q := range []string{`BEGIN IMMEDIATE`, `INSERT INTO raw(x) VALUES(?)`, `COMMIT`} {
		if sts[i], err = c.Prepare(q); err != nil {
			b.Fatal(err)
		}
		defer sts[i].Close()
	}
	begin, ins, commit := sts[0], sts[1], sts[2]
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if err := begin.Exec(); err != nil {
			b.Fatal(err)
		}
		if err := ins.Exec(int64(i)); err != nil {
			b.Fatal(err)
		}
		if err := commit.Exec(); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "tx/s")
}

// ReadRows is the size of the pull-path read.
const ReadRows = 100_000

var prefilled struct {
	sync.Mutex
	paths map[string]string
}

// prefill returns a database holding ReadRows sync_changes rows (10,000
// commits of 10 operations) written by d through the normal commit path. It
// is built once per driver and test binary.
func prefill(tb testing.TB, d Driver) string {
	prefilled.Lock()
	defer prefilled.Unlock()
	if p, ok := prefilled.paths[d.Name]; ok {
		return p
	}
	if tmpRoot == "" {
		tb.Fatal("RunMain was not used")
	}
	path := filepath.Join(tmpRoot, "read-"+d.Name+".db")
	c, err := OpenConfigured(d, path)
	if err != nil {
		tb.Fatal(err)
	}
	if err := CreateSchema(c, partition); err != nil {
		tb.Fatal(err)
	}
	a, err := NewAppender(c)
	if err != nil {
		tb.Fatal(err)
	}
	const nops = 10
	if err := a.begin.Exec(); err != nil {
		tb.Fatal(err)
	}
	for i := 0; i < ReadRows/nops; i++ {
		if _, err := a.Apply(MakeCommit(partition, "client", int64(i), nops)); err != nil {
			tb.Fatal(err)
		}
	}
	if err := a.commit.Exec(); err != nil {
		tb.Fatal(err)
	}
	a.Close()
	if err := c.Close(); err != nil {
		tb.Fatal(err)
	}
	if prefilled.paths == nil {
		prefilled.paths = map[string]string{}
	}
	prefilled.paths[d.Name] = path
	return path
}

// ReadQuery is the pull-path read: a partition's changes after a cursor, in
// commit order.
const ReadQuery = `SELECT commit_seq, idx, tbl, row_id, op, row_version, scopes, payload
	FROM sync_changes WHERE partition = ? AND commit_seq > ?
	ORDER BY commit_seq, idx`

// BenchRead measures reading ReadRows sync_changes rows in commit order from
// a pre-filled database (hot page cache) and reports rows/s.
func BenchRead(b *testing.B, d Driver) {
	path := prefill(b, d)
	c, err := OpenConfigured(d, path)
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	st, err := c.Prepare(ReadQuery)
	if err != nil {
		b.Fatal(err)
	}
	defer st.Close()
	var (
		seq, idx, op, ver  int64
		tbl, rowID, scopes string
		payload            []byte
		rows, payloadBytes int64
	)
	dest := []any{&seq, &idx, &tbl, &rowID, &op, &ver, &scopes, &payload}
	count := func() error {
		rows++
		payloadBytes += int64(len(payload))
		return nil
	}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		rows = 0
		if err := st.Query([]any{partition, int64(0)}, dest, count); err != nil {
			b.Fatal(err)
		}
		if rows != ReadRows {
			b.Fatalf("read %d rows, want %d", rows, ReadRows)
		}
	}
	b.StopTimer()
	b.ReportMetric(float64(b.N)*ReadRows/b.Elapsed().Seconds(), "rows/s")
}

// Benchmarks is what each test binary runs per driver.
func Benchmarks() []struct {
	Name string
	Fn   func(*testing.B, Driver)
} {
	return []struct {
		Name string
		Fn   func(*testing.B, Driver)
	}{
		{"Append1", func(b *testing.B, d Driver) { BenchAppend(b, d, 1) }},
		{"Append10", func(b *testing.B, d Driver) { BenchAppend(b, d, 10) }},
		{"GroupCommit64", func(b *testing.B, d Driver) { BenchGroupCommit(b, d, 64, 64, 1) }},
		{"RawTx", BenchRawTx},
		{"Read100k", BenchRead},
		{"ApplyNoSync", BenchApplyNoSync},
	}
}

// CheckDriver is a functional test of the workload on d: the commit path,
// idempotency, and that a failing commit inside a group-commit batch rolls
// back only its own savepoint.
func CheckDriver(t *testing.T, d Driver) {
	c, a := newDB(t, d)
	v, err := Version(c)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%s: sqlite %s", d.Name, v)

	seq, err := a.CommitOne(MakeCommit(partition, "c", 1, 3))
	if err != nil || seq != 1 {
		t.Fatalf("first commit: seq %d, %v", seq, err)
	}
	if _, err := a.CommitOne(MakeCommit(partition, "c", 1, 3)); !errors.Is(err, ErrDuplicate) {
		t.Fatalf("retried commit: %v, want ErrDuplicate", err)
	}

	// One batch: good, bad (NULL payload violates NOT NULL after the
	// commit_seq was bumped and rows were written), good.
	good1 := MakeCommit(partition, "c", 2, 2)
	bad := MakeCommit(partition, "c", 3, 2)
	bad.Ops[1].Payload = nil
	good2 := MakeCommit(partition, "c", 4, 2)
	g := &GroupWriter{a: a, maxBatch: 3}
	batch := []*request{{c: good1}, {c: bad}, {c: good2}}
	g.flush(batch)
	if batch[0].err != nil || batch[0].seq != 2 {
		t.Fatalf("good1: seq %d, %v", batch[0].seq, batch[0].err)
	}
	if batch[1].err == nil {
		t.Fatal("bad commit succeeded")
	}
	if batch[2].err != nil || batch[2].seq != 3 {
		t.Fatalf("good2: seq %d, %v (bad commit's seq not rolled back?)", batch[2].seq, batch[2].err)
	}
	var maxSeq, commits, changes, pushes int64
	for _, q := range []struct {
		sql string
		v   *int64
	}{
		{`SELECT max_commit_seq FROM sync_partitions`, &maxSeq},
		{`SELECT count(*) FROM sync_commits`, &commits},
		{`SELECT count(*) FROM sync_changes`, &changes},
		{`SELECT count(*) FROM sync_push_results`, &pushes},
	} {
		if err := queryOne(c, q.sql, q.v); err != nil {
			t.Fatal(err)
		}
	}
	if maxSeq != 3 || commits != 3 || changes != 3+2+2 || pushes != 3 {
		t.Fatalf("after batch: max_commit_seq=%d commits=%d changes=%d push_results=%d",
			maxSeq, commits, changes, pushes)
	}

	// The real writer with concurrent submitters.
	gw := NewGroupWriter(a, 8)
	var wg sync.WaitGroup
	errs := make(chan error, 16)
	for s := 0; s < 16; s++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for n := int64(0); n < 10; n++ {
				if _, err := gw.Submit(MakeCommit(partition, "g"+strconv.Itoa(s), n, 1)); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	gw.Close()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if err := queryOne(c, `SELECT max_commit_seq FROM sync_partitions`, &maxSeq); err != nil {
		t.Fatal(err)
	}
	if maxSeq != 3+160 {
		t.Fatalf("max_commit_seq = %d after 160 grouped commits, want %d", maxSeq, 3+160)
	}
	t.Logf("%s: 160 commits in %d batches", d.Name, gw.Batches)
}
