package pgstore

import (
	"context"
	"embed"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/syncgo/syncgo/store"
)

//go:embed migrations/*.sql
var migrationFiles embed.FS

// Store is the Postgres [store.Store]. It is safe for concurrent use.
type Store struct {
	pool     *pgxpool.Pool
	ownsPool bool
	log      *slog.Logger
	cfg      Config

	// schema is the state EnsureSchema installed; nil before.
	schema atomic.Pointer[schemaState]
	closed atomic.Bool
	// done is closed by Close: it stops the commit listeners.
	done chan struct{}
	// dbSchema is the database schema the connections' search_path
	// selected at Open (current_schema()): commit notifications carry it,
	// since NOTIFY channels are database-wide.
	dbSchema string
	// segmentLZ4 is whether a segment's bytes are stored compressed with
	// lz4 rather than pglz (segments.go): read at Open.
	segmentLZ4 bool
	// segmentBodies is whether the database has sync_segment_bodies
	// (migrations/007; a read-only store may open a database without
	// it): read at Open.
	segmentBodies bool
	// listenProbe is how long the listen connection may stay silent before
	// it is pinged (listenProbeAfter; shorter in tests).
	listenProbe time.Duration
	// listenPooled is set once the listen connection was found to go
	// through a connection pooler (warned about once).
	listenPooled atomic.Bool
	// listenDeliveryWait bounds a delivery probe through a pooler
	// (listenDeliveryWaitDefault).
	listenDeliveryWait time.Duration
	// shortWindow is the longest range of the log a commit window reads
	// in one round trip, without its candidate walk (shortWindowCommits;
	// 0 in tests of the paged reads).
	shortWindow int64
	// shortRows is the most changes a short window read returns
	// (shortWindowRows; less in tests).
	shortRows int64
	// shares are the short window reads in flight (window_share.go);
	// sharedAnswers counts the answers of shared reads (Stats).
	shares        windowShares
	sharedAnswers atomic.Int64
	// entries are the request state reads in flight (entry_share.go);
	// sharedEntries counts the answers of shared reads (Stats).
	entries       entryShares
	sharedEntries atomic.Int64

	// clients is the write-behind of deferred client records
	// (clients.go); nil on a read-only store.
	clients *store.ClientWriteBehind

	// groups are the group-commit queues of the partitions being written
	// (group.go).
	groups groups

	// roundTrips counts the round trips of write transactions (tests and
	// benchmarks).
	roundTrips atomic.Int64
	// coalesced counts the batches whose appends went as one statement,
	// tailFallbacks those whose coalesced tail failed and was sent again
	// commit by commit, coalescedRows the writeRows statements of the
	// coalesced tails that committed (coalesce.go; tests read them).
	coalesced, tailFallbacks, coalescedRows atomic.Int64

	// connRetries counts the operations run again on a fresh connection
	// after a lost one (retry.go); lostAt is when a lost connection was
	// last seen (unix nanoseconds; 0: never): the pool pings a connection
	// idle since before it when handing it out.
	connRetries atomic.Int64
	lostAt      atomic.Int64
	// renotifier announces again, in the background, the commits whose
	// notification failed (write.go).
	renotifier *renotifier
	// renotifyTimeout bounds the announcing again of one commit
	// (renotifyTimeout; longer in tests).
	renotifyTimeout time.Duration

	writes      atomic.Int64
	writeErrors atomic.Int64
	batches     atomic.Int64
	commits     atomic.Int64

	// windowScratch keeps the candidate and commit-row buffers of window
	// reads (*windowScratch, window.go) from one window to the next.
	windowScratch sync.Pool
	// windowBufs keeps the memory of the paged windows released by their
	// callers (*windowBufs, window.go) for the next ones.
	windowBufs sync.Pool
}

var _ store.Store = (*Store)(nil)

// Open connects (or adopts cfg.Pool) and brings the core sync_* tables to
// the layout of the embedded migrations, in the schema that the
// connections' search_path selects: it reads the catalog first and runs no
// DDL at all when they are there (core.go); otherwise it runs what is
// missing under the migration lock (lock.go). With cfg.ReadOnly it only
// reads (see Config.ReadOnly).
func Open(ctx context.Context, cfg Config) (*Store, error) {
	urlSizesPool := cfg.MaxConns <= 0 && strings.Contains(cfg.URL, "pool_max_conns")
	cfg = cfg.withDefaults()
	s := &Store{pool: cfg.Pool, log: cfg.Logger, cfg: cfg, done: make(chan struct{}), listenProbe: listenProbeAfter, listenDeliveryWait: listenDeliveryWaitDefault, shortWindow: shortWindowCommits, shortRows: shortWindowRows,
		groups: groups{m: map[string]*group{}}}
	s.renotifier, s.renotifyTimeout = newRenotifier(s), renotifyTimeout
	if s.pool == nil {
		if cfg.URL == "" {
			return nil, errors.New("pgstore: open: neither URL nor Pool is set")
		}
		pc, err := pgxpool.ParseConfig(cfg.URL)
		if err != nil {
			return nil, fmt.Errorf("pgstore: open: parse url: %w", err)
		}
		if urlSizesPool {
			s.cfg.MaxConns = pc.MaxConns
		} else {
			pc.MaxConns = cfg.MaxConns
		}
		if !strings.Contains(cfg.URL, "pool_min_conns") {
			pc.MinConns = min(max(cfg.MinConns, 0), pc.MaxConns)
		}
		if pc.ConnConfig.ConnectTimeout <= 0 {
			// A server that accepts the connection and never answers
			// would hold the request that needed it without a bound.
			pc.ConnConfig.ConnectTimeout = defaultConnectTimeout
		}
		if err := setTCP(&pc.ConnConfig.Config); err != nil {
			return nil, fmt.Errorf("pgstore: open: url: %w", err)
		}
		pooled := false
		if !strings.Contains(cfg.URL, "default_query_exec_mode") {
			if pooled, err = detectPooler(ctx, pc.ConnConfig); err != nil {
				return nil, fmt.Errorf("pgstore: open: %w", err)
			}
			if pooled {
				pc.ConnConfig.DefaultQueryExecMode = pooledExecMode
				s.log.Info("pgstore: Postgres is reached through a connection pooler; statements are sent unnamed (default_query_exec_mode=cache_describe). Behind a session-mode pooler, default_query_exec_mode=cache_statement in the URL is faster",
					"host", pc.ConnConfig.Host, "port", pc.ConnConfig.Port)
			}
		}
		if cfg.ReadOnly && !pooled {
			// Postgres itself then refuses any write on these sessions.
			// A pooler refuses a startup parameter it does not know; the
			// store's own checks still refuse every write.
			pc.ConnConfig.RuntimeParams["default_transaction_read_only"] = "on"
		}
		// A connection idle when a lost one was seen is pinged before it
		// is handed out (pgxpool pings those idle for over a second
		// anyway): after a Postgres restart every idle connection is dead.
		pc.ShouldPing = s.shouldPing
		if s.pool, err = pgxpool.NewWithConfig(ctx, pc); err != nil {
			return nil, fmt.Errorf("pgstore: open: %w", err)
		}
		s.ownsPool = true
	}
	if !s.ownsPool {
		s.checkGivenPool(ctx)
	}
	if err := s.open(ctx); err != nil {
		if s.ownsPool {
			s.pool.Close()
		}
		return nil, fmt.Errorf("pgstore: open: %w", err)
	}
	if !cfg.ReadOnly {
		s.clients = store.NewClientWriteBehind(clientWriteBehind, s.writeDeferredClients, s.log)
	}
	return s, nil
}

// open migrates the core tables (unless read-only) and records the
// database schema's name.
func (s *Store) open(ctx context.Context) error {
	if !s.cfg.ReadOnly {
		if _, err := s.migrateCore(ctx); err != nil {
			return err
		}
	}
	if err := s.pool.QueryRow(ctx, sqlCurrentSchema).Scan(&s.dbSchema); err != nil {
		return fmt.Errorf("current schema: %w", err)
	}
	if err := s.pool.QueryRow(ctx, sqlOpenProbe).Scan(&s.segmentLZ4, &s.segmentBodies); err != nil {
		return fmt.Errorf("toast compression: %w", err)
	}
	return nil
}

// sqlToastLZ4 reports whether the server can compress TOAST values with
// lz4 (Postgres 14 and later, built with it).
const sqlToastLZ4 = `SELECT coalesce((SELECT 'lz4' = ANY(enumvals) FROM pg_settings WHERE name = 'default_toast_compression'), false)`

// sqlOpenProbe reads sqlToastLZ4 and whether the database has
// sync_segment_bodies (a read-only store may open one without it).
const sqlOpenProbe = `SELECT (` + sqlToastLZ4 + `), to_regclass('sync_segment_bodies') IS NOT NULL`

// Pool returns the connection pool.
func (s *Store) Pool() *pgxpool.Pool { return s.pool }

// Stats returns a snapshot of the store's counters.
func (s *Store) Stats() store.Stats {
	return store.Stats{
		Writes:      s.writes.Load(),
		WriteErrors: s.writeErrors.Load(),
		Batches:     s.batches.Load(),
		Commits:     s.commits.Load(),
		ConnRetries: s.connRetries.Load(),

		SharedWindows: s.sharedAnswers.Load(),
		SharedEntries: s.sharedEntries.Load(),
	}
}

// Close releases the store; it closes the pool when Open created it and
// stops the commit listeners. Later calls fail with store.ErrClosed.
func (s *Store) Close() error {
	if s.closed.Swap(true) {
		return nil
	}
	close(s.done)
	s.renotifier.close()
	if s.clients != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		if err := s.clients.Close(ctx); err != nil {
			s.log.Warn("deferred client records not written at close", "err", err)
		}
		cancel()
	}
	if s.ownsPool {
		s.pool.Close()
	}
	return nil
}

// check returns store.ErrClosed after Close.
func (s *Store) check() error {
	if s.closed.Load() {
		return store.ErrClosed
	}
	return nil
}

// ErrReadOnly is the error of a call that would write, on a store opened
// with Config.ReadOnly.
var ErrReadOnly = errors.New("pgstore: the store was opened read-only and does not write")

// checkWrite is check for the calls that write.
func (s *Store) checkWrite() error {
	if err := s.check(); err != nil {
		return err
	}
	if s.cfg.ReadOnly {
		return ErrReadOnly
	}
	return nil
}

// ensured returns the installed schema, or store.ErrNoSchema.
func (s *Store) ensured() (*schemaState, error) {
	if err := s.check(); err != nil {
		return nil, err
	}
	st := s.schema.Load()
	if st == nil {
		return nil, store.ErrNoSchema
	}
	return st, nil
}

// table returns the installed schema's table, or store.ErrNoSchema or
// store.ErrUnknownTable.
func (s *Store) table(name string) (*tableSQL, error) {
	st, err := s.ensured()
	if err != nil {
		return nil, err
	}
	return st.table(name)
}
