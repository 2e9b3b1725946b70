package sqlitestore

import (
	"context"
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/syncgo/syncgo/schema"
	"github.com/syncgo/syncgo/store"
)

//go:embed migrations/*.sql
var migrationFiles embed.FS

// coreDDL is the core DDL: every migration file, in file name order.
var coreDDL = joinMigrations(migrationFiles)

// joinMigrations concatenates the .sql files of fsys's migrations
// directory in file name order.
func joinMigrations(fsys embed.FS) string {
	names, err := fs.Glob(fsys, "migrations/*.sql")
	if err != nil {
		panic(err)
	}
	slices.Sort(names)
	var b strings.Builder
	for _, name := range names {
		body, err := fsys.ReadFile(name)
		if err != nil {
			panic(err)
		}
		b.Write(body)
		b.WriteString("\n")
	}
	return b.String()
}

// MemoryPath is the Config.Path of a throw-away database: a temporary file
// that is deleted on Close and not synced to disk.
const MemoryPath = ":memory:"

// Config configures a Store. Zero fields take the defaults of withDefaults.
type Config struct {
	// Path is the database file, created if missing; MemoryPath for a
	// throw-away database. Required: Open refuses an empty Path.
	Path string
	// Logger receives driver events; nil discards them.
	Logger *slog.Logger
	// MaxBatch bounds the writes that share one transaction. Default 128.
	MaxBatch int
	// ReadConns is the number of read connections. Default 4. As many
	// scan connections (with a small page cache) serve the scans of
	// bootstrap pages and a catch-up's bulk windows.
	ReadConns int
	// Synchronous is the SQLite synchronous setting: "FULL" (the default,
	// durable at acknowledgement) or "NORMAL" (WAL-safe, but the last
	// commits may be lost on power failure). MemoryPath forces "OFF".
	Synchronous string
	// BusyTimeoutMs is how long a connection waits for a lock held by
	// another process. Default 5000.
	BusyTimeoutMs int
	// ReadOnly opens the database file read-only: it must exist (it is
	// never created), no DDL is applied and nothing is written, so a
	// database a running server is writing can be inspected (PlanSchema,
	// the reads). Writes fail with ErrReadOnly; EnsureSchema succeeds only
	// when it would write nothing.
	ReadOnly bool
	// MaxPageCount caps the database's size in pages (PRAGMA
	// max_page_count on the write connection); 0 leaves SQLite's default.
	// A write past it fails like one on a full disk, with
	// store.ErrStorageFull; reads go on.
	MaxPageCount int64
	// WALAutocheckpoint is how many pages the WAL holds before the writer
	// copies them back into the database file (PRAGMA
	// wal_autocheckpoint on the write connection). Default 8000 (about
	// 32 MiB of 4 KiB pages), against SQLite's 1000: every checkpoint
	// copies the pages written since the last one and syncs the database
	// file twice, on the writer's path, so rarer checkpoints copy each
	// often-written page (the log's tail, its index pages) less often.
	// Negative turns automatic checkpoints off (something else must run
	// them, or the WAL grows without bound).
	WALAutocheckpoint int
	// NoWALBuffer writes the WAL as SQLite does, two writes per frame,
	// instead of gathering a commit's frames into one write (walbuf.go;
	// used only with synchronous FULL or EXTRA). For comparison.
	NoWALBuffer bool
	// RecentCommits is how many of the writer's last commits are kept in
	// memory to answer short commit windows without reading the log
	// (recent.go). Default 1,024; negative keeps none.
	RecentCommits int
	// IdleCheckpoint is how long the writer must have committed nothing
	// before the WAL is copied back into the database file on a
	// connection of its own (checkpoint.go). Default 1 s; negative:
	// never (only the writer's own checkpoints run).
	IdleCheckpoint time.Duration
}

// defaultWALAutocheckpoint is Config.WALAutocheckpoint's default: at
// SQLite's 1000 pages a checkpoint came every ~8 group commits in
// push+pull rounds and was 14 % of the writer's time; at 8000 the rounds
// went 2,881 -> 3,256/s (BENCHMARKS.md, round fifteen).
const defaultWALAutocheckpoint = 8000

// ErrReadOnly is the error of a write on a store opened with
// Config.ReadOnly.
var ErrReadOnly = errors.New("sqlitestore: the store is read-only")

func (c Config) withDefaults() Config {
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	if c.MaxBatch <= 0 {
		c.MaxBatch = 128
	}
	if c.ReadConns <= 0 {
		c.ReadConns = 4
	}
	if c.Synchronous == "" {
		c.Synchronous = "FULL"
	}
	if c.BusyTimeoutMs <= 0 {
		c.BusyTimeoutMs = 5000
	}
	if c.IdleCheckpoint == 0 {
		c.IdleCheckpoint = defaultIdleCheckpoint
	}
	switch {
	case c.WALAutocheckpoint == 0:
		c.WALAutocheckpoint = defaultWALAutocheckpoint
	case c.WALAutocheckpoint < 0:
		c.WALAutocheckpoint = 0 // SQLite's "off"
	}
	return c
}

// Store is the SQLite implementation of store.Store.
type Store struct {
	cfg     Config
	path    string
	tempDir string
	readers *readPool // query-only connections
	// scanners are query-only connections with a small page cache, for
	// the scans of bootstrap pages and a catch-up's bulk windows
	// (scanCachePages).
	scanners *readPool
	w        *writer // owns the write connection
	// noSegmentBodies: a read-only store on a database of a release
	// before sync_segment_bodies (migrations/004), whose segments are all
	// stored as bytes (segments.go).
	noSegmentBodies bool
	// clients is the write-behind of deferred client records
	// (clients.go); nil without a writer.
	clients *store.ClientWriteBehind

	mu     sync.RWMutex
	schema *compiledSchema

	closeOnce sync.Once
	closed    atomic.Bool
	// done is closed by Close: it ends the shared window reads' contexts.
	done chan struct{}

	// shares are the short window reads queued or in flight
	// (window_share.go); sharedAnswers counts the answers of shared reads.
	shares        windowShares
	sharedAnswers atomic.Int64

	// recent are the writer's last commits (recent.go), nil without a
	// writer or when Config.RecentCommits is negative; recentAnswers
	// counts the windows they answered.
	recent        *recentCommits
	recentAnswers atomic.Int64

	// entries are the request state reads queued or in flight, the
	// states after windows answered from recent included
	// (entry_share.go); sharedEntries counts the answers of shared reads.
	entries       entryShares
	sharedEntries atomic.Int64

	stats struct {
		writes, writeErrors, batches, commits atomic.Int64
	}

	// windowScratch keeps the candidate and commit-row buffers of range
	// reads (*windowScratch, read.go) from one window to the next.
	windowScratch sync.Pool
}

var _ store.Store = (*Store)(nil)

// Open opens (creating if needed) the database at cfg.Path, brings the
// core tables to the layout (see planCore; nothing is written when they
// are at it, nothing when they cannot be brought there) and starts the
// writer. With cfg.ReadOnly it only opens the read connections.
func Open(ctx context.Context, cfg Config) (*Store, error) {
	return open(ctx, cfg, openHooks{})
}

// openHooks let tests interfere with an open.
type openHooks struct {
	// coreStep, when set, runs after each core DDL step, in the open's
	// transaction; an error fails the open.
	coreStep func(line string) error
}

func open(ctx context.Context, cfg Config, hooks openHooks) (*Store, error) {
	if cfg.Path == "" {
		// Most likely a setting left unset: a throw-away database in its
		// place would lose every commit on Close, without a word.
		return nil, errors.New("open sqlite store: Config.Path is empty: name the database file, or MemoryPath for a throw-away database")
	}
	cfg = cfg.withDefaults()
	s := &Store{cfg: cfg, path: cfg.Path, done: make(chan struct{})}
	if cfg.ReadOnly {
		return s.openReadOnly(ctx)
	}
	if cfg.Path == MemoryPath {
		dir, err := os.MkdirTemp("", "syncgo-sqlite-")
		if err != nil {
			return nil, fmt.Errorf("open sqlite store: %w", err)
		}
		s.tempDir = dir
		s.path = filepath.Join(dir, "sync.db")
		s.cfg.Synchronous = "OFF"
	}
	if err := ctx.Err(); err != nil {
		s.cleanup()
		return nil, fmt.Errorf("open sqlite store: %w", err)
	}
	wc, err := openConn(s.path, s.cfg, connWriter)
	if err != nil {
		s.cleanup()
		return nil, fmt.Errorf("open sqlite store: %w", err)
	}
	// The core tables first, in the database's journal mode: a refused or
	// failed open leaves the file as it was.
	if err := migrateCore(ctx, wc, hooks); err != nil {
		wc.close()
		s.cleanup()
		return nil, fmt.Errorf("open sqlite store: core tables: %w", err)
	}
	if err := useWAL(wc); err != nil {
		wc.close()
		s.cleanup()
		return nil, fmt.Errorf("open sqlite store: %w", err)
	}
	if s.readers, err = openReadPool(s.path, s.cfg, cfg.ReadConns, connReader, 0); err != nil {
		wc.close()
		s.cleanup()
		return nil, fmt.Errorf("open sqlite store: %w", err)
	}
	if s.scanners, err = openReadPool(s.path, s.cfg, cfg.ReadConns, connReader, scanCachePages); err != nil {
		wc.close()
		s.cleanup()
		return nil, fmt.Errorf("open sqlite store: %w", err)
	}
	s.w = newWriter(s, wc)
	switch {
	case s.cfg.RecentCommits == 0:
		s.recent = newRecentCommits(defaultRecentCommits, defaultRecentBytes)
	case s.cfg.RecentCommits > 0:
		s.recent = newRecentCommits(s.cfg.RecentCommits, defaultRecentBytes)
	}
	if s.cfg.IdleCheckpoint > 0 {
		cc, err := openConn(s.path, s.cfg, connCheckpoint)
		if err != nil {
			wc.close()
			s.cleanup()
			return nil, fmt.Errorf("open sqlite store: %w", err)
		}
		s.w.ck = newCheckpointer(cc, &s.stats.batches, s.cfg.IdleCheckpoint)
		go s.w.ck.run()
	}
	s.clients = store.NewClientWriteBehind(clientWriteBehind, s.writeDeferredClients, s.cfg.Logger)
	go s.w.run()
	return s, nil
}

// openReadOnly opens the read connections of a read-only store on an
// existing file.
func (s *Store) openReadOnly(ctx context.Context) (*Store, error) {
	if s.path == MemoryPath || s.path == "" {
		return nil, errors.New("open sqlite store: a read-only store needs a database file")
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("open sqlite store: %w", err)
	}
	// SQLite would report a missing file only as "unable to open".
	if _, err := os.Stat(s.path); err != nil {
		return nil, fmt.Errorf("open sqlite store: %w", err)
	}
	var err error
	if s.readers, err = openReadPool(s.path, s.cfg, s.cfg.ReadConns, connReadOnly, 0); err != nil {
		return nil, fmt.Errorf("open sqlite store: %w", err)
	}
	if s.scanners, err = openReadPool(s.path, s.cfg, s.cfg.ReadConns, connReadOnly, scanCachePages); err != nil {
		s.cleanup()
		return nil, fmt.Errorf("open sqlite store: %w", err)
	}
	// Fail now on a file that is not a database.
	if err := s.read(ctx, func(c *conn) error {
		var n, bodies int64
		err := c.queryRow("SELECT count(*), count(*) FILTER (WHERE name = 'sync_segment_bodies') FROM sqlite_master").Scan(&n, &bodies)
		s.noSegmentBodies = bodies == 0
		return err
	}); err != nil {
		s.cleanup()
		return nil, fmt.Errorf("open sqlite store: %w", err)
	}
	return s, nil
}

// migrateCore brings the core tables to the layout (planCore) in one
// transaction, taken only when there is something to do; ctx's
// cancellation interrupts it. The plan is read again inside the
// transaction, since another process may have migrated meanwhile.
func migrateCore(ctx context.Context, c *conn, hooks openHooks) (err error) {
	c.setInterrupt(ctx)
	defer c.clearInterrupt()
	defer c.forget()
	steps, err := planCore(c)
	if err != nil || len(steps) == 0 {
		return err
	}
	if err := c.execOnce("BEGIN IMMEDIATE"); err != nil {
		return err
	}
	defer func() {
		if err != nil {
			c.clearInterrupt()
			if rbErr := c.execOnce("ROLLBACK"); rbErr != nil {
				err = errors.Join(err, fmt.Errorf("rollback: %w", rbErr))
			}
		}
	}()
	if steps, err = planCore(c); err != nil {
		return err
	}
	for _, st := range steps {
		if err := c.execOnce(st.sql); err != nil {
			return fmt.Errorf("%s: %w", st.line, err)
		}
		if hooks.coreStep != nil {
			if err := hooks.coreStep(st.line); err != nil {
				return err
			}
		}
	}
	return c.execOnce("COMMIT")
}

// cleanup closes the read connections and removes a throw-away database;
// the writer closes its own connection.
func (s *Store) cleanup() {
	if s.readers != nil {
		s.readers.close()
	}
	if s.scanners != nil {
		s.scanners.close()
	}
	if s.tempDir != "" {
		os.RemoveAll(s.tempDir)
	}
}

// Close stops the writer, waits for queued writes to finish and closes the
// database.
func (s *Store) Close() error {
	s.closeOnce.Do(func() {
		if s.clients != nil {
			// Written before the writer refuses work.
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			_ = s.clients.Close(ctx)
			cancel()
		}
		s.closed.Store(true)
		close(s.done)
		if s.w != nil {
			s.w.stop()
		}
		s.cleanup()
	})
	return nil
}

// Stats returns a snapshot of the store's counters.
func (s *Store) Stats() store.Stats {
	return store.Stats{
		Writes:      s.stats.writes.Load(),
		WriteErrors: s.stats.writeErrors.Load(),
		Batches:     s.stats.batches.Load(),
		Commits:     s.stats.commits.Load(),

		RecentWindows: s.recentAnswers.Load(),
		SharedWindows: s.sharedAnswers.Load(),
		SharedEntries: s.sharedEntries.Load(),
	}
}

func (s *Store) compiled() (*compiledSchema, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.schema == nil {
		return nil, store.ErrNoSchema
	}
	return s.schema, nil
}

func (s *Store) table(name string) (*tableSQL, error) {
	cs, err := s.compiled()
	if err != nil {
		return nil, err
	}
	t, ok := cs.tables[name]
	if !ok {
		return nil, fmt.Errorf("%w: %q", store.ErrUnknownTable, name)
	}
	return t, nil
}

// compiledSchema is the ensured schema with the SQL generated for it.
type compiledSchema struct {
	schema *schema.Compiled
	tables map[string]*tableSQL
}
