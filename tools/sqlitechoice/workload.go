// Package sqlitechoice holds the benchmark that picked the Go SQLite library
// for the embedded storage driver (see docs/sqlite-driver.md in the main
// module).
//
// It is its own Go module so that none of the candidate libraries end up in
// the main module's dependency graph. The workload, the group-commit writer
// and a database/sql adapter live in this package; the per-library adapters
// and benchmarks live in the test files:
//
//   - bench_test.go: the pure-Go candidates (modernc.org/sqlite,
//     github.com/ncruces/go-sqlite3, zombiezen.com/go/sqlite);
//   - mattn/bench_test.go: the cgo candidate (github.com/mattn/go-sqlite3).
//     It must be a separate test binary because both mattn's and ncruces'
//     database/sql drivers register the driver name "sqlite3" in init, and
//     database/sql panics on a duplicate registration.
//
// Re-run everything with (-p 1: the two test binaries must not run at the
// same time, they would share the disk and the CPUs):
//
//	go test -p 1 -run '^$' -bench . -count 5 ./... | tee bench.txt
//	go run ./cmd/medians < bench.txt
//
// The databases go to $TMPDIR, which must be on a real disk (not tmpfs) for
// the fsync figures to mean anything. The functional checks of every driver
// (commit path, idempotency, savepoint isolation in a batch) run with plain
// `go test ./...`.
package sqlitechoice

import (
	"errors"
	"fmt"
	"strconv"
)

// Conn is the small surface of an SQLite connection that the workload needs.
// It is implemented once over database/sql (SQLConn) and once per native API
// (in the test files).
type Conn interface {
	// Exec runs one statement that is not reused (DDL, PRAGMA).
	Exec(query string) error
	// Prepare returns a statement that is kept and reused.
	Prepare(query string) (Stmt, error)
	Close() error
}

// Stmt is a prepared, reusable statement. Arguments are int64, int, string,
// []byte (nil binds NULL) or nil. Scan destinations are *int64, *string or
// *[]byte.
type Stmt interface {
	Exec(args ...any) error
	// QueryRow runs the statement and scans its first row into dest. It
	// reports false, with no error, when there is no row.
	QueryRow(args []any, dest ...any) (bool, error)
	// Query runs the statement and, for each row, scans it into dest and
	// calls fn.
	Query(args []any, dest []any, fn func() error) error
	Close() error
}

// Driver is one candidate library: a name and a way to open a file database.
type Driver struct {
	Name string
	Open func(path string) (Conn, error)
}

// OpenConfigured opens path with d and applies the durability settings of
// the workload: WAL journal, synchronous=FULL (a commit is durable when
// COMMIT returns), and a busy timeout. It verifies that the settings took
// effect, since some builds change the defaults (mattn compiles with
// SQLITE_DEFAULT_WAL_SYNCHRONOUS=1, i.e. NORMAL).
func OpenConfigured(d Driver, path string) (Conn, error) {
	c, err := d.Open(path)
	if err != nil {
		return nil, err
	}
	if err := configure(c); err != nil {
		c.Close()
		return nil, fmt.Errorf("%s: %w", d.Name, err)
	}
	return c, nil
}

func configure(c Conn) error {
	for _, p := range []string{
		"PRAGMA journal_mode=WAL",
		"PRAGMA synchronous=FULL",
		"PRAGMA busy_timeout=5000",
	} {
		if err := c.Exec(p); err != nil {
			return fmt.Errorf("%s: %w", p, err)
		}
	}
	var mode string
	if err := queryOne(c, "PRAGMA journal_mode", &mode); err != nil {
		return err
	}
	var sync int64
	if err := queryOne(c, "PRAGMA synchronous", &sync); err != nil {
		return err
	}
	if mode != "wal" || sync != 2 {
		return fmt.Errorf("journal_mode=%q synchronous=%d, want wal and 2 (FULL)", mode, sync)
	}
	return nil
}

func queryOne(c Conn, query string, dest ...any) error {
	st, err := c.Prepare(query)
	if err != nil {
		return fmt.Errorf("prepare %q: %w", query, err)
	}
	defer st.Close()
	ok, err := st.QueryRow(nil, dest...)
	if err != nil {
		return fmt.Errorf("%q: %w", query, err)
	}
	if !ok {
		return fmt.Errorf("%q: no row", query)
	}
	return nil
}

// Version reports sqlite_version() on c.
func Version(c Conn) (string, error) {
	var v string
	err := queryOne(c, "SELECT sqlite_version()", &v)
	return v, err
}

// Schema is the reference sync server's commit-log schema plus one app table.
var Schema = []string{
	`CREATE TABLE IF NOT EXISTS sync_partitions(
		partition TEXT PRIMARY KEY,
		max_commit_seq INTEGER NOT NULL DEFAULT 0,
		horizon_seq INTEGER NOT NULL DEFAULT 0)`,
	`CREATE TABLE IF NOT EXISTS sync_commits(
		partition TEXT, commit_seq INTEGER, client_id TEXT, client_commit_id TEXT,
		actor_id TEXT, created_at_ms INTEGER, writer_version INTEGER,
		PRIMARY KEY(partition, commit_seq))`,
	`CREATE TABLE IF NOT EXISTS sync_changes(
		partition TEXT, commit_seq INTEGER, idx INTEGER, tbl TEXT, row_id TEXT,
		op INTEGER, row_version INTEGER, scopes TEXT NOT NULL, payload BLOB,
		PRIMARY KEY(partition, commit_seq, idx))`,
	`CREATE TABLE IF NOT EXISTS sync_change_scopes(
		partition TEXT, tbl TEXT, var TEXT, value TEXT, commit_seq INTEGER,
		PRIMARY KEY(partition, tbl, var, value, commit_seq))`,
	`CREATE TABLE IF NOT EXISTS sync_push_results(
		partition TEXT, client_id TEXT, client_commit_id TEXT, result TEXT NOT NULL,
		PRIMARY KEY(partition, client_id, client_commit_id))`,
	`CREATE TABLE IF NOT EXISTS tasks(
		_sync_partition TEXT NOT NULL, _sync_row_id TEXT NOT NULL,
		id TEXT, title TEXT, project_id TEXT,
		_sync_server_version INTEGER NOT NULL, _sync_scopes TEXT NOT NULL,
		_sync_payload BLOB NOT NULL, _sync_column_versions BLOB,
		PRIMARY KEY(_sync_partition, _sync_row_id))`,
	`CREATE TABLE IF NOT EXISTS sync_row_scopes(
		partition TEXT, tbl TEXT, var TEXT, value TEXT, row_id TEXT,
		PRIMARY KEY(partition, tbl, var, value, row_id))`,
}

// CreateSchema creates the tables and the partition row.
func CreateSchema(c Conn, partition string) error {
	for _, s := range Schema {
		if err := c.Exec(s); err != nil {
			return err
		}
	}
	st, err := c.Prepare(`INSERT OR IGNORE INTO sync_partitions(partition) VALUES(?)`)
	if err != nil {
		return err
	}
	defer st.Close()
	return st.Exec(partition)
}

// Op is one row operation in a pushed commit.
type Op struct {
	Table, RowID         string
	Kind                 int64 // 1 = upsert
	ID, Title, ProjectID string
	ScopeVar, ScopeValue string
	Scopes               string // JSON object of the row's scopes
	Payload              []byte // ~100 bytes
}

// Commit is one client commit (a push).
type Commit struct {
	Partition, ClientID, ClientCommitID, ActorID string
	CreatedAtMs                                  int64
	Ops                                          []Op
}

// MakeCommit builds commit number n of a client with nops operations. Row ids
// cycle through a space of 20,000 rows per partition, so a long run mixes
// inserts with updates.
func MakeCommit(partition, clientID string, n int64, nops int) *Commit {
	c := &Commit{
		Partition:      partition,
		ClientID:       clientID,
		ClientCommitID: clientID + "-" + strconv.FormatInt(n, 10),
		ActorID:        "user-" + clientID,
		CreatedAtMs:    1_700_000_000_000 + n,
		Ops:            make([]Op, nops),
	}
	for j := range c.Ops {
		r := (n*int64(nops) + int64(j)) % 20000
		id := "t" + strconv.FormatInt(r, 10)
		project := "p" + strconv.FormatInt(r%50, 10)
		title := "task title number " + strconv.FormatInt(n, 10)
		payload := make([]byte, 0, 112)
		payload = append(payload, `{"id":"`...)
		payload = append(payload, id...)
		payload = append(payload, `","title":"`...)
		payload = append(payload, title...)
		payload = append(payload, `","project_id":"`...)
		payload = append(payload, project...)
		payload = append(payload, `","done":false,"pad":"`...)
		for len(payload) < 98 {
			payload = append(payload, 'x')
		}
		payload = append(payload, `"}`...)
		c.Ops[j] = Op{
			Table: "tasks", RowID: id, Kind: 1,
			ID: id, Title: title, ProjectID: project,
			ScopeVar: "project_id", ScopeValue: project,
			Scopes:  `{"project_id":"` + project + `"}`,
			Payload: payload,
		}
	}
	return c
}

// ErrDuplicate is returned by Apply when the commit was already applied (the
// idempotency lookup hit); the stored result is returned with it.
var ErrDuplicate = errors.New("commit already applied")

// Appender applies commits with reused prepared statements. It is not safe
// for concurrent use: one goroutine owns the connection.
type Appender struct {
	c Conn

	begin, commit, rollback           Stmt
	savepoint, release, rollbackTo    Stmt
	selPush, bumpSeq                  Stmt
	selRow, upsertRow, upsertRowScope Stmt
	insCommit, insChange, insScope    Stmt
	insPush                           Stmt

	// scratch
	rowVersion int64
	colVer     []byte
	result     string
}

// NewAppender prepares the statements of the commit path on c.
func NewAppender(c Conn) (*Appender, error) {
	a := &Appender{c: c}
	for _, p := range []struct {
		st  *Stmt
		sql string
	}{
		{&a.begin, `BEGIN IMMEDIATE`},
		{&a.commit, `COMMIT`},
		{&a.rollback, `ROLLBACK`},
		{&a.savepoint, `SAVEPOINT c`},
		{&a.release, `RELEASE c`},
		{&a.rollbackTo, `ROLLBACK TO c`},
		{&a.selPush, `SELECT result FROM sync_push_results
			WHERE partition = ? AND client_id = ? AND client_commit_id = ?`},
		{&a.bumpSeq, `UPDATE sync_partitions SET max_commit_seq = max_commit_seq + 1
			WHERE partition = ? RETURNING max_commit_seq`},
		{&a.selRow, `SELECT _sync_server_version, _sync_column_versions FROM tasks
			WHERE _sync_partition = ? AND _sync_row_id = ?`},
		{&a.upsertRow, `INSERT INTO tasks(_sync_partition, _sync_row_id, id, title, project_id,
				_sync_server_version, _sync_scopes, _sync_payload, _sync_column_versions)
			VALUES(?, ?, ?, ?, ?, ?, ?, ?, ?)
			ON CONFLICT(_sync_partition, _sync_row_id) DO UPDATE SET
				id = excluded.id, title = excluded.title, project_id = excluded.project_id,
				_sync_server_version = excluded._sync_server_version,
				_sync_scopes = excluded._sync_scopes, _sync_payload = excluded._sync_payload,
				_sync_column_versions = excluded._sync_column_versions`},
		{&a.upsertRowScope, `INSERT INTO sync_row_scopes(partition, tbl, var, value, row_id)
			VALUES(?, ?, ?, ?, ?) ON CONFLICT DO NOTHING`},
		{&a.insCommit, `INSERT INTO sync_commits(partition, commit_seq, client_id,
				client_commit_id, actor_id, created_at_ms, writer_version)
			VALUES(?, ?, ?, ?, ?, ?, ?)`},
		{&a.insChange, `INSERT INTO sync_changes(partition, commit_seq, idx, tbl, row_id,
				op, row_version, scopes, payload)
			VALUES(?, ?, ?, ?, ?, ?, ?, ?, ?)`},
		{&a.insScope, `INSERT INTO sync_change_scopes(partition, tbl, var, value, commit_seq)
			VALUES(?, ?, ?, ?, ?) ON CONFLICT DO NOTHING`},
		{&a.insPush, `INSERT INTO sync_push_results(partition, client_id, client_commit_id, result)
			VALUES(?, ?, ?, ?)`},
	} {
		st, err := c.Prepare(p.sql)
		if err != nil {
			a.Close()
			return nil, fmt.Errorf("prepare %q: %w", p.sql, err)
		}
		*p.st = st
	}
	return a, nil
}

// Close closes the prepared statements (not the connection).
func (a *Appender) Close() {
	for _, st := range []Stmt{a.begin, a.commit, a.rollback, a.savepoint, a.release,
		a.rollbackTo, a.selPush, a.bumpSeq, a.selRow, a.upsertRow, a.upsertRowScope,
		a.insCommit, a.insChange, a.insScope, a.insPush} {
		if st != nil {
			st.Close()
		}
	}
}

// Apply applies c inside the current transaction and returns its commit
// sequence number. On error the caller must roll back (the transaction or the
// commit's savepoint): Apply may have written part of the commit.
func (a *Appender) Apply(c *Commit) (int64, error) {
	// Idempotency: a retried push returns the stored result.
	ok, err := a.selPush.QueryRow([]any{c.Partition, c.ClientID, c.ClientCommitID}, &a.result)
	if err != nil {
		return 0, fmt.Errorf("idempotency lookup: %w", err)
	}
	if ok {
		return 0, ErrDuplicate
	}
	var seq int64
	ok, err = a.bumpSeq.QueryRow([]any{c.Partition}, &seq)
	if err != nil {
		return 0, fmt.Errorf("allocate commit_seq: %w", err)
	}
	if !ok {
		return 0, fmt.Errorf("unknown partition %q", c.Partition)
	}
	for i := range c.Ops {
		op := &c.Ops[i]
		// Current row: its version (conflict detection) and column versions.
		a.colVer = a.colVer[:0]
		found, err := a.selRow.QueryRow([]any{c.Partition, op.RowID}, &a.rowVersion, &a.colVer)
		if err != nil {
			return 0, fmt.Errorf("select row: %w", err)
		}
		if !found {
			a.colVer = append(a.colVer[:0], 0, 0, 0, 0, 0, 0, 0, 0)
		}
		// New column-versions blob: the commit seq stamped into it.
		for k := 0; k < 8 && k < len(a.colVer); k++ {
			a.colVer[k] = byte(seq >> (8 * k))
		}
		if err := a.upsertRow.Exec(c.Partition, op.RowID, op.ID, op.Title, op.ProjectID,
			seq, op.Scopes, op.Payload, a.colVer); err != nil {
			return 0, fmt.Errorf("upsert row: %w", err)
		}
		if err := a.upsertRowScope.Exec(c.Partition, op.Table, op.ScopeVar, op.ScopeValue,
			op.RowID); err != nil {
			return 0, fmt.Errorf("upsert row scope: %w", err)
		}
	}
	if err := a.insCommit.Exec(c.Partition, seq, c.ClientID, c.ClientCommitID, c.ActorID,
		c.CreatedAtMs, int64(1)); err != nil {
		return 0, fmt.Errorf("insert commit: %w", err)
	}
	for i := range c.Ops {
		op := &c.Ops[i]
		if err := a.insChange.Exec(c.Partition, seq, int64(i), op.Table, op.RowID, op.Kind,
			seq, op.Scopes, op.Payload); err != nil {
			return 0, fmt.Errorf("insert change: %w", err)
		}
	}
	for i := range c.Ops {
		op := &c.Ops[i]
		dup := false
		for _, prev := range c.Ops[:i] {
			if prev.Table == op.Table && prev.ScopeVar == op.ScopeVar && prev.ScopeValue == op.ScopeValue {
				dup = true
				break
			}
		}
		if dup {
			continue
		}
		if err := a.insScope.Exec(c.Partition, op.Table, op.ScopeVar, op.ScopeValue, seq); err != nil {
			return 0, fmt.Errorf("insert change scope: %w", err)
		}
	}
	res := `{"status":"applied","commit_seq":` + strconv.FormatInt(seq, 10) + `}`
	if err := a.insPush.Exec(c.Partition, c.ClientID, c.ClientCommitID, res); err != nil {
		return 0, fmt.Errorf("insert push result: %w", err)
	}
	return seq, nil
}

// CommitOne applies c in its own BEGIN IMMEDIATE ... COMMIT transaction. It
// returns once the commit is durable (synchronous=FULL).
func (a *Appender) CommitOne(c *Commit) (int64, error) {
	if err := a.begin.Exec(); err != nil {
		return 0, err
	}
	seq, err := a.Apply(c)
	if err != nil {
		a.rollback.Exec()
		return 0, err
	}
	if err := a.commit.Exec(); err != nil {
		a.rollback.Exec()
		return 0, err
	}
	return seq, nil
}
