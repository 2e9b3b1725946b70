package sqlitestore

import (
	"context"
	_ "embed"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"

	"github.com/syncgo/syncgo/schema"
	"github.com/syncgo/syncgo/store"
)

//go:embed migrations/001_core.sql
var coreDDL string

// MemoryPath is the Config.Path of a throw-away database: a temporary file
// that is deleted on Close and not synced to disk.
const MemoryPath = ":memory:"

// Config configures a Store. Zero fields take the defaults of withDefaults.
type Config struct {
	// Path is the database file, created if missing; MemoryPath for a
	// throw-away database.
	Path string
	// Logger receives driver events; nil discards them.
	Logger *slog.Logger
	// MaxBatch bounds the writes that share one transaction. Default 128.
	MaxBatch int
	// ReadConns is the number of read connections. Default 4.
	ReadConns int
	// Synchronous is the SQLite synchronous setting: "FULL" (the default,
	// durable at acknowledgement) or "NORMAL" (WAL-safe, but the last
	// commits may be lost on power failure). MemoryPath forces "OFF".
	Synchronous string
	// BusyTimeoutMs is how long a connection waits for a lock held by
	// another process. Default 5000.
	BusyTimeoutMs int
}

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
	return c
}

// Store is the SQLite implementation of store.Store.
type Store struct {
	cfg     Config
	path    string
	tempDir string
	readers *readPool // query-only connections
	w       *writer   // owns the write connection

	mu     sync.RWMutex
	schema *compiledSchema

	closeOnce sync.Once
	closed    atomic.Bool

	stats struct {
		writes, writeErrors, batches, commits atomic.Int64
	}
}

var _ store.Store = (*Store)(nil)

// Open opens (creating if needed) the database at cfg.Path, applies the
// core tables and starts the writer.
func Open(ctx context.Context, cfg Config) (*Store, error) {
	cfg = cfg.withDefaults()
	s := &Store{cfg: cfg, path: cfg.Path}
	if cfg.Path == MemoryPath || cfg.Path == "" {
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
	wc, err := openConn(s.path, s.cfg, false)
	if err != nil {
		s.cleanup()
		return nil, fmt.Errorf("open sqlite store: %w", err)
	}
	if err := applyCoreDDL(ctx, wc); err != nil {
		wc.close()
		s.cleanup()
		return nil, fmt.Errorf("open sqlite store: core tables: %w", err)
	}
	if s.readers, err = openReadPool(s.path, s.cfg, cfg.ReadConns); err != nil {
		wc.close()
		s.cleanup()
		return nil, fmt.Errorf("open sqlite store: %w", err)
	}
	s.w = newWriter(s, wc)
	go s.w.run()
	return s, nil
}

// applyCoreDDL creates the core tables in one transaction; ctx's
// cancellation interrupts it.
func applyCoreDDL(ctx context.Context, c *conn) (err error) {
	c.setInterrupt(ctx)
	defer c.clearInterrupt()
	if err := c.execOnce("BEGIN IMMEDIATE"); err != nil {
		return err
	}
	if err := c.execScript(coreDDL); err != nil {
		_ = c.execOnce("ROLLBACK")
		return err
	}
	return c.execOnce("COMMIT")
}

// cleanup closes the read connections and removes a throw-away database;
// the writer closes its own connection.
func (s *Store) cleanup() {
	if s.readers != nil {
		s.readers.close()
	}
	if s.tempDir != "" {
		os.RemoveAll(s.tempDir)
	}
}

// Close stops the writer, waits for queued writes to finish and closes the
// database.
func (s *Store) Close() error {
	s.closeOnce.Do(func() {
		s.closed.Store(true)
		s.w.stop()
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
