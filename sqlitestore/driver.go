package sqlitestore

import (
	"context"
	"errors"
	"fmt"
	"math"
	"reflect"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"zombiezen.com/go/sqlite"

	"github.com/syncgo/syncgo/store"
)

// The SQLite engine is modernc.org/sqlite (pure Go), called through the
// direct API of zombiezen.com/go/sqlite: statements are prepared once per
// connection, bound by position and stepped, with no database/sql layer;
// see docs/sqlite-driver.md for why.

// synchronousModes are the accepted Config.Synchronous values.
var synchronousModes = map[string]int64{"0": 0, "OFF": 0, "1": 1, "NORMAL": 1, "2": 2, "FULL": 2, "3": 3, "EXTRA": 3}

// connRole is what a connection is opened for.
type connRole int

const (
	// connWriter: the writer's connection, which creates a missing file.
	connWriter connRole = iota
	// connReader: a query-only connection of a read-write store.
	connReader
	// connReadOnly: a connection of a read-only store: the file is opened
	// read-only (SQLite's mode=ro), never created.
	connReadOnly
	// connCheckpoint: the idle checkpoints' connection (checkpoint.go),
	// which writes only the database file's pages from the WAL.
	connCheckpoint
)

// openConn opens one connection on the database file at path with the
// settings of cfg: busy timeout, synchronous and foreign keys off. Read
// connections are query-only. The writer switches the database to WAL
// (useWAL) once the core tables are migrated.
func openConn(path string, cfg Config, role connRole) (_ *conn, err error) {
	level, ok := synchronousModes[strings.ToUpper(cfg.Synchronous)]
	if !ok {
		return nil, fmt.Errorf("synchronous %q: want one of OFF, NORMAL, FULL, EXTRA", cfg.Synchronous)
	}
	var flags sqlite.OpenFlags
	switch role {
	case connWriter:
		flags = sqlite.OpenReadWrite | sqlite.OpenCreate
	case connReader, connCheckpoint:
		flags = sqlite.OpenReadWrite
	case connReadOnly:
		flags = sqlite.OpenReadOnly
	}
	name := path
	if role == connWriter && level >= 2 && !cfg.NoWALBuffer && runtime.GOOS != "windows" {
		// Durable at each commit: the WAL's writes are gathered
		// (walbuf.go).
		if err := walVFS.register(); err != nil {
			return nil, err
		}
		name, flags = walURI(path), flags|sqlite.OpenURI
	}
	sc, err := sqlite.OpenConn(name, flags)
	if err != nil {
		return nil, err
	}
	c := newConn(sc)
	defer func() {
		if err != nil {
			c.close()
		}
	}()
	// OpenConn installs a busy handler that waits until interrupted; the
	// store waits BusyTimeoutMs for another process's lock instead.
	sc.SetBusyTimeout(time.Duration(cfg.BusyTimeoutMs) * time.Millisecond)
	pragmas := []string{"PRAGMA synchronous=" + strings.ToUpper(cfg.Synchronous), "PRAGMA foreign_keys=OFF"}
	switch role {
	case connCheckpoint:
		// No statement of its own writes; the checkpoint is not one.
		pragmas = append(pragmas, "PRAGMA query_only=1")
	case connReader, connReadOnly:
		pragmas = append(pragmas, "PRAGMA query_only=1", "PRAGMA mmap_size="+strconv.Itoa(mmapBytes))
	case connWriter:
		// Every write runs in a savepoint of its group's transaction, so
		// each page a write changes is first copied to the statement
		// sub-journal: in memory, not a temporary file (a write syscall
		// per page was a tenth of the server's CPU in push+pull rounds).
		pragmas = append(pragmas, "PRAGMA temp_store=MEMORY")
		pragmas = append(pragmas, "PRAGMA wal_autocheckpoint="+strconv.Itoa(cfg.WALAutocheckpoint))
		if cfg.MaxPageCount > 0 {
			pragmas = append(pragmas, "PRAGMA max_page_count="+strconv.FormatInt(cfg.MaxPageCount, 10))
		}
	}
	for _, p := range pragmas {
		if err := c.execOnce(p); err != nil {
			return nil, fmt.Errorf("%s: %w", p, err)
		}
	}
	if role == connWriter {
		// The WAL file keeps the size it grew to; past twice the pages
		// of a checkpoint (a long read held the checkpoints back) it is
		// cut back when the WAL restarts.
		var pageSize int64
		if err := c.queryRowOnce("PRAGMA page_size", &pageSize); err != nil {
			return nil, fmt.Errorf("page_size: %w", err)
		}
		if err := c.execOnce("PRAGMA journal_size_limit=" + strconv.FormatInt(walSizeLimit(cfg.WALAutocheckpoint, pageSize), 10)); err != nil {
			return nil, fmt.Errorf("journal_size_limit: %w", err)
		}
	}
	var got int64
	if err := c.queryRowOnce("PRAGMA synchronous", &got); err != nil {
		return nil, fmt.Errorf("synchronous: %w", err)
	}
	if got != level {
		return nil, fmt.Errorf("synchronous is %d, want %d", got, level)
	}
	return c, nil
}

// mmapBytes is how much of the database file a read connection maps: none.
// Mapping (256 MiB) took a cold 100,000-row bootstrap's server CPU from
// 1.20 to 0.76 s, but on a database that grows, every read transaction
// that sees a new file size unmaps and maps again: push+pull rounds lost
// 12 % (1,790 -> 1,580 rounds/s, SQLite, two alternating pairs), and rounds
// are the common path.
const mmapBytes = 0

// scanCachePages is the page cache of a scan connection: 16 pages, not
// SQLite's 2 MiB. The scans of bootstrap pages (ScanRows, PageBoundaries)
// and the bulk windows of a catch-up run on their own connections; each
// read transaction after a write starts with an emptied cache, and a
// scan reads thousands of pages once. In a large cache every page read
// took a fresh slot from the allocator, which had returned the last
// transaction's slots to the kernel, so each was faulted in anew; in 16
// slots the pages are read into the same memory again. These connections
// mapped the file before (256 MiB): on these VMs a fault maps 16
// neighbouring pages of the file for ~25 us, and the log's pages lie
// among the other tables', so a mapped catch-up faulted in about the
// whole file; every write unmapped it again. Measured on a copied seed,
// fresh server per run: catch-up of 100,000 commits 270-281 -> 256-265
// ms (3 pairs), cold 100,000-row bootstrap 194-199 -> 165-182 ms (3
// pairs), SQLite images level (299-318 against 309-335); with 1,000-byte
// values, catch-up 329-333 -> 209-220 ms, bootstrap level. Where nothing
// writes, a mapping is never dropped and large rows read faster mapped
// (BenchmarkCommitWindow, log=10000, 2,000-byte titles: 1.8-2.8 ms a
// window mapped, 6.6-8.2 here); a server's reads follow writes.
const scanCachePages = 16

// walSizeLimit is the journal_size_limit, in bytes, of a WAL
// checkpointed every pages pages of pageSize bytes: twice that, at least
// 64 MiB; -1 (no limit) when checkpoints are off.
func walSizeLimit(pages int, pageSize int64) int64 {
	if pages <= 0 {
		return -1
	}
	return max(int64(pages)*2*pageSize, 64<<20)
}

// useWAL puts the database in WAL mode (a no-op when it is).
func useWAL(c *conn) error {
	var mode string
	if err := c.queryRowOnce("PRAGMA journal_mode=WAL", &mode); err != nil {
		return fmt.Errorf("journal_mode: %w", err)
	}
	if !strings.EqualFold(mode, "wal") {
		return fmt.Errorf("journal_mode is %q, want wal", mode)
	}
	return nil
}

// conn is one SQLite connection with its prepared statements. It is used
// by one goroutine at a time: the writer's by the writer goroutine, a read
// connection by the read that took it from the pool.
type conn struct {
	c     *sqlite.Conn
	stmts map[string]*sqlite.Stmt
	// intr is the channel the driver watches to interrupt the
	// connection (installed once, replaced only after it fired); stop
	// unregisters the current read's context from it.
	intr chan struct{}
	stop func() bool
	// statements counts the statements run through stmt (prepared and
	// cached), for the writer's benchmarks.
	statements int64
	// writes counts the statements run that may write: every one but a
	// cached statement whose text starts with SELECT (the writer's
	// candidates, tx.go).
	writes int64
	// hot is above zero while a push's statements run, and other, when
	// set (the writer's connection), runs before any other statement
	// (batchcache.go); a failure fails that statement.
	hot   int
	other func() error
}

// enterHot marks the statements until exitHot as a push's: other does
// not run before them. Use: defer c.enterHot().exitHot().
func (c *conn) enterHot() *conn {
	c.hot++
	return c
}

func (c *conn) exitHot() { c.hot-- }

// beforeStatement runs other before a statement that is not hot.
func (c *conn) beforeStatement() error {
	if c.hot > 0 || c.other == nil {
		return nil
	}
	return c.other()
}

func newConn(c *sqlite.Conn) *conn {
	return &conn{c: c, stmts: map[string]*sqlite.Stmt{}}
}

// errNoRows is what row.Scan returns when the query returned no row.
var errNoRows = errors.New("sqlitestore: no rows in result set")

// stmt returns the prepared statement of query, preparing it on first use.
// A statement is reset after each use (release) and every parameter is
// bound again before the next (bind checks the count).
func (c *conn) stmt(query string) (*sqlite.Stmt, error) {
	if err := c.beforeStatement(); err != nil {
		return nil, err
	}
	c.statements++
	if !strings.HasPrefix(query, "SELECT") {
		c.writes++
	}
	if st, ok := c.stmts[query]; ok {
		return st, nil
	}
	st, err := c.c.Prepare(query)
	if err != nil {
		return nil, err
	}
	c.stmts[query] = st
	return st, nil
}

// release readies a statement for its next use. It does not clear the
// bindings: every use binds all parameters anyway, and
// sqlite3_clear_bindings expires any statement whose plan depends on a
// bound value (with this SQLite, the window query), which would re-prepare
// it at every execution. The last values stay bound until the next use.
func release(st *sqlite.Stmt) {
	_ = st.Reset()
}

// bound returns the statement of query with args bound.
func (c *conn) bound(query string, args []any) (*sqlite.Stmt, error) {
	st, err := c.stmt(query)
	if err != nil {
		return nil, err
	}
	if err := bind(st, args); err != nil {
		release(st)
		return nil, err
	}
	return st, nil
}

// exec runs a statement to completion.
func (c *conn) exec(query string, args ...any) error {
	st, err := c.bound(query, args)
	if err != nil {
		return err
	}
	defer release(st)
	for {
		more, err := st.Step()
		if err != nil || !more {
			return err
		}
	}
}

// execChanges runs a statement to completion and returns the number of
// rows it inserted, updated or deleted.
func (c *conn) execChanges(query string, args ...any) (int64, error) {
	if err := c.exec(query, args...); err != nil {
		return 0, err
	}
	return int64(c.c.Changes()), nil
}

// queryRow prepares a single-row query; its Scan runs it.
func (c *conn) queryRow(query string, args ...any) *row {
	st, err := c.bound(query, args)
	return &row{st: st, err: err}
}

// query runs a query; the caller iterates and closes the rows.
func (c *conn) query(query string, args ...any) (*rows, error) {
	st, err := c.bound(query, args)
	if err != nil {
		return nil, err
	}
	return &rows{st: st}, nil
}

// execOnce runs a statement without caching it.
func (c *conn) execOnce(query string) error {
	if err := c.beforeStatement(); err != nil {
		return err
	}
	c.writes++
	st, _, err := c.c.PrepareTransient(query)
	if err != nil {
		return err
	}
	defer st.Finalize()
	for {
		more, err := st.Step()
		if err != nil || !more {
			return err
		}
	}
}

// queryRowOnce reads one row without caching the statement.
func (c *conn) queryRowOnce(query string, dest ...any) error {
	if err := c.beforeStatement(); err != nil {
		return err
	}
	c.writes++
	st, _, err := c.c.PrepareTransient(query)
	if err != nil {
		return err
	}
	defer st.Finalize()
	if more, err := st.Step(); err != nil {
		return err
	} else if !more {
		return errNoRows
	}
	return scan(st, dest)
}

// execScript runs a script of statements in order, stopping at the first
// error; it opens no transaction of its own.
func (c *conn) execScript(script string) error {
	if err := c.beforeStatement(); err != nil {
		return err
	}
	c.writes++
	for {
		script = strings.TrimSpace(script)
		if script == "" {
			return nil
		}
		st, trailing, err := c.c.PrepareTransient(script)
		if err != nil {
			return err
		}
		script = script[len(script)-trailing:]
		for {
			more, err := st.Step()
			if err != nil {
				st.Finalize()
				return err
			}
			if !more {
				break
			}
		}
		if err := st.Finalize(); err != nil {
			return err
		}
	}
}

// forget finalizes the cached statements, after DDL changed the tables
// they use.
func (c *conn) forget() {
	for q, st := range c.stmts {
		_ = st.Finalize()
		delete(c.stmts, q)
	}
}

// setInterrupt makes ctx's cancellation interrupt the connection's
// statements, until clearInterrupt. The driver's SetInterrupt starts a
// watcher goroutine and resets every prepared statement on each call, so
// it runs only when a channel is installed or replaced; each read
// registers its context with context.AfterFunc instead.
func (c *conn) setInterrupt(ctx context.Context) {
	if ctx.Done() == nil {
		return
	}
	if c.intr == nil {
		c.intr = make(chan struct{})
		c.c.SetInterrupt(c.intr)
	}
	intr := c.intr
	c.stop = context.AfterFunc(ctx, func() { close(intr) })
}

func (c *conn) clearInterrupt() {
	if c.stop == nil {
		return
	}
	fired := !c.stop()
	c.stop = nil
	if fired {
		// The channel is (or is being) closed: a fresh one for the next
		// read. SetInterrupt waits for the driver's watcher of the old
		// channel to finish first; an interrupt it delivers now, with no
		// statement running, is cleared by SQLite at the next statement.
		c.intr = make(chan struct{})
		c.c.SetInterrupt(c.intr)
	}
}

func (c *conn) close() error {
	c.stmts = nil
	return c.c.Close() // finalizes the prepared statements
}

// row is the result of queryRow.
type row struct {
	st  *sqlite.Stmt
	err error
}

// Scan steps the query once and reads the row into dest; errNoRows when
// there is none.
func (r *row) Scan(dest ...any) error {
	if r.err != nil {
		return r.err
	}
	defer release(r.st)
	more, err := r.st.Step()
	if err != nil {
		return err
	}
	if !more {
		return errNoRows
	}
	return scan(r.st, dest)
}

// rows iterates the result of query, as sql.Rows does.
type rows struct {
	st   *sqlite.Stmt
	err  error
	done bool
}

func (r *rows) Next() bool {
	if r.done {
		return false
	}
	more, err := r.st.Step()
	if err != nil || !more {
		r.err = err
		r.Close()
		return false
	}
	return true
}

func (r *rows) Scan(dest ...any) error { return scan(r.st, dest) }

func (r *rows) Err() error { return r.err }

func (r *rows) Close() error {
	if !r.done {
		r.done = true
		release(r.st)
	}
	return nil
}

// nullInt64 scans an INTEGER that may be NULL.
type nullInt64 struct {
	Int64 int64
	Valid bool
}

// nullString scans a TEXT that may be NULL.
type nullString struct {
	String string
	Valid  bool
}

// bind binds args to the statement's parameters by position.
func bind(st *sqlite.Stmt, args []any) error {
	if n := st.BindParamCount(); n != len(args) {
		return fmt.Errorf("sqlitestore: %d arguments for %d parameters", len(args), n)
	}
	for i, a := range args {
		p := i + 1
		switch v := a.(type) {
		case nil:
			st.BindNull(p)
		case string:
			st.BindText(p, v)
		case []byte:
			if v == nil {
				st.BindNull(p)
			} else {
				st.BindBytes(p, v)
			}
		case int64:
			st.BindInt64(p, v)
		case int:
			st.BindInt64(p, int64(v))
		case int32:
			st.BindInt64(p, int64(v))
		case float64:
			st.BindFloat(p, v)
		case bool:
			st.BindBool(p, v)
		default:
			if err := bindReflect(st, p, a); err != nil {
				return err
			}
		}
	}
	return nil
}

// scan reads the current row into dest by position.
func scan(st *sqlite.Stmt, dest []any) error {
	if n := st.ColumnCount(); n != len(dest) {
		return fmt.Errorf("sqlitestore: %d destinations for %d columns", len(dest), n)
	}
	for i, d := range dest {
		switch p := d.(type) {
		case *string:
			*p = st.ColumnText(i)
		case *int64:
			*p = st.ColumnInt64(i)
		case *int32:
			*p = st.ColumnInt32(i)
		case *int:
			*p = st.ColumnInt(i)
		case *bool:
			*p = st.ColumnInt64(i) != 0
		case *[]byte:
			*p = columnBytes(st, i)
		case *nullInt64:
			p.Valid = st.ColumnType(i) != sqlite.TypeNull
			p.Int64 = 0
			if p.Valid {
				p.Int64 = st.ColumnInt64(i)
			}
		case *nullString:
			p.Valid = st.ColumnType(i) != sqlite.TypeNull
			p.String = ""
			if p.Valid {
				p.String = st.ColumnText(i)
			}
		default:
			if err := scanReflect(st, i, d); err != nil {
				return err
			}
		}
	}
	return nil
}

// bindReflect binds a value of a named or less common basic type.
func bindReflect(st *sqlite.Stmt, p int, a any) error {
	v := reflect.ValueOf(a)
	switch v.Kind() {
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		st.BindInt64(p, v.Int())
	case reflect.Uint8, reflect.Uint16, reflect.Uint32:
		st.BindInt64(p, int64(v.Uint()))
	case reflect.Uint, reflect.Uint64:
		u := v.Uint()
		if u > math.MaxInt64 {
			return fmt.Errorf("sqlitestore: argument %d: %d overflows int64", p, u)
		}
		st.BindInt64(p, int64(u))
	case reflect.Float32, reflect.Float64:
		st.BindFloat(p, v.Float())
	case reflect.Bool:
		st.BindBool(p, v.Bool())
	case reflect.String:
		st.BindText(p, v.String())
	default:
		return fmt.Errorf("sqlitestore: argument %d: unsupported type %T", p, a)
	}
	return nil
}

// scanReflect scans into a pointer to a named or less common basic type.
func scanReflect(st *sqlite.Stmt, i int, d any) error {
	v := reflect.ValueOf(d)
	if v.Kind() != reflect.Pointer || v.IsNil() {
		return fmt.Errorf("sqlitestore: column %d: destination %T is not a non-nil pointer", i, d)
	}
	e := v.Elem()
	switch e.Kind() {
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		n := st.ColumnInt64(i)
		if e.OverflowInt(n) {
			return fmt.Errorf("sqlitestore: column %d: %d overflows %s", i, n, e.Type())
		}
		e.SetInt(n)
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		n := st.ColumnInt64(i)
		if n < 0 || e.OverflowUint(uint64(n)) {
			return fmt.Errorf("sqlitestore: column %d: %d overflows %s", i, n, e.Type())
		}
		e.SetUint(uint64(n))
	case reflect.Float32, reflect.Float64:
		e.SetFloat(st.ColumnFloat(i))
	case reflect.Bool:
		e.SetBool(st.ColumnInt64(i) != 0)
	case reflect.String:
		e.SetString(st.ColumnText(i))
	default:
		return fmt.Errorf("sqlitestore: column %d: unsupported destination %T", i, d)
	}
	return nil
}

// columnBytes copies a BLOB or TEXT cell: nil for NULL, a non-nil slice
// (empty for an empty value) otherwise.
func columnBytes(st *sqlite.Stmt, i int) []byte {
	if st.ColumnType(i) == sqlite.TypeNull {
		return nil
	}
	b := make([]byte, st.ColumnLen(i))
	st.ColumnBytes(i, b)
	return b
}

// readPool is the pool of read-only connections. A read takes the
// connection put back last: when reads do not overlap, they run on one
// connection, whose page cache still holds what the last read read when
// nothing was written since, while the others' caches stay as small as
// they are (a burst of 1,000 socket attaches each reading a client
// record filled every connection's cache with the whole table, 1.6 KiB
// of resident memory per socket).
type readPool struct {
	mu     sync.Mutex
	idle   []*conn       // the free connections, the one put back last at the end
	tokens chan struct{} // one per free connection
	closed chan struct{}
	n      int
}

// openReadPool opens n read connections, with a page cache of
// cachePages pages when it is positive (SQLite's default otherwise).
func openReadPool(path string, cfg Config, n int, role connRole, cachePages int) (*readPool, error) {
	p := &readPool{tokens: make(chan struct{}, n), closed: make(chan struct{})}
	for range n {
		c, err := openConn(path, cfg, role)
		if err == nil && cachePages > 0 {
			if err = c.execOnce("PRAGMA cache_size=" + strconv.Itoa(cachePages)); err != nil {
				c.close()
			}
		}
		if err != nil {
			p.close()
			return nil, err
		}
		p.idle = append(p.idle, c)
		p.tokens <- struct{}{}
		p.n++
	}
	return p, nil
}

// take waits for a free connection; ctx's cancellation interrupts the
// statements run on it until put.
func (p *readPool) take(ctx context.Context) (*conn, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	select {
	case <-p.tokens:
		c := p.pop()
		c.setInterrupt(ctx)
		return c, nil
	case <-p.closed:
		return nil, store.ErrClosed
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

func (p *readPool) put(c *conn) {
	c.clearInterrupt()
	// A read transaction whose COMMIT or ROLLBACK was interrupted (its
	// context cancelled meanwhile) is still open: it ends here, or the
	// next BEGIN on the connection fails ("cannot start a transaction
	// within a transaction"). A statement left running would keep the
	// ROLLBACK from ending it: the statements are reset first then.
	if !c.c.AutocommitEnabled() {
		if err := c.exec("ROLLBACK"); err != nil {
			c.forget()
			_ = c.exec("ROLLBACK")
		}
	}
	p.mu.Lock()
	p.idle = append(p.idle, c)
	p.mu.Unlock()
	p.tokens <- struct{}{}
}

// pop takes the connection put back last; the caller holds its token.
func (p *readPool) pop() *conn {
	p.mu.Lock()
	defer p.mu.Unlock()
	c := p.idle[len(p.idle)-1]
	p.idle[len(p.idle)-1] = nil
	p.idle = p.idle[:len(p.idle)-1]
	return c
}

// close closes every connection, waiting for the taken ones to come back.
func (p *readPool) close() {
	close(p.closed)
	for range p.n {
		<-p.tokens
		p.pop().close()
	}
}

// read runs fn on a read connection.
func (s *Store) read(ctx context.Context, fn func(c *conn) error) error {
	return s.readOn(ctx, s.readers, fn)
}

// readOn runs fn on a connection of pool.
func (s *Store) readOn(ctx context.Context, pool *readPool, fn func(c *conn) error) error {
	if s.closed.Load() {
		return store.ErrClosed
	}
	c, err := pool.take(ctx)
	if err != nil {
		return err
	}
	defer pool.put(c)
	err = fn(c)
	if err != nil && sqlite.ErrCode(err) == sqlite.ResultInterrupt {
		if cerr := ctx.Err(); cerr != nil {
			return fmt.Errorf("%w: %v", cerr, err)
		}
	}
	return err
}

// scan runs fn on a scan connection (a read connection with a small
// page cache, see scanCachePages): the reads of bootstrap pages. Bulk commit
// windows (a catch-up's read-ahead) read on the same pool (readTxOn).
func (s *Store) scan(ctx context.Context, fn func(c *conn) error) error {
	return s.readOn(ctx, s.scanners, fn)
}

// readTx runs fn on a read connection inside one read transaction, so
// that its statements see one snapshot.
func (s *Store) readTx(ctx context.Context, fn func(c *conn) error) error {
	return s.readTxOn(ctx, s.readers, fn)
}

// readTxOn is readTx on a connection of pool.
func (s *Store) readTxOn(ctx context.Context, pool *readPool, fn func(c *conn) error) error {
	return s.readOn(ctx, pool, func(c *conn) (err error) {
		if err := c.exec("BEGIN"); err != nil {
			return err
		}
		defer func() {
			end := "COMMIT"
			if err != nil {
				end = "ROLLBACK"
			}
			// A read transaction: ending it cannot lose anything, but a
			// connection left inside one would pin its snapshot.
			if endErr := c.exec(end); endErr != nil && err == nil {
				err = endErr
			}
		}()
		return fn(c)
	})
}

// isUniqueViolation reports a UNIQUE or PRIMARY KEY constraint failure.
func isUniqueViolation(err error) bool {
	code := sqlite.ErrCode(err)
	return code == sqlite.ResultConstraintUnique || code == sqlite.ResultConstraintPrimaryKey
}

// fenceMessage is the RAISE message of the sync_commits_writer_fence
// trigger (migrations/001_core.sql).
const fenceMessage = "sync.storage.writer_fence_rejected"

// isFenceRejection reports the writer-fence trigger's abort.
func isFenceRejection(err error) bool {
	return err != nil && sqlite.ErrCode(err) == sqlite.ResultConstraintTrigger && strings.Contains(err.Error(), fenceMessage)
}

// violatedIndex names the declared unique index a constraint error is
// about. SQLite reports the columns ("UNIQUE constraint failed: t.a, t.b"),
// so the index is found by its column list.
func violatedIndex(t *tableSQL, err error) string {
	_, list, ok := strings.Cut(err.Error(), "UNIQUE constraint failed: ")
	if !ok {
		return "unique"
	}
	var cols []string
	for _, c := range strings.Split(list, ",") {
		c = strings.TrimSpace(c)
		if _, col, ok := strings.Cut(c, "."); ok {
			c = col
		}
		if c != "_sync_partition" {
			cols = append(cols, c)
		}
	}
	for _, ix := range t.t.Indexes() {
		if ix.Unique && slices.Equal(ix.Columns, cols) {
			return ix.PhysicalName
		}
	}
	return "unique"
}
