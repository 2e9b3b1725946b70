package pgstore

import (
	"log/slog"
	"runtime"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
)

// Config configures [Open]. The zero value of every field but one of URL
// and Pool means its default; see withDefaults.
type Config struct {
	// URL is the connection string (postgres://… or key=value), used when
	// Pool is nil. Unknown URL parameters such as search_path become
	// session settings. When it names no default_query_exec_mode and
	// leads to a connection pooler (PgBouncer and the like, found by the
	// backend's process id, pooler.go), the pool sends unnamed statements
	// (pgx's cache_describe), which a transaction-mode pooler needs.
	// Without connect_timeout, making a connection (TCP, TLS and
	// authentication) gives up after 10 s, so that a Postgres that
	// accepts connections and never answers fails the requests that need
	// one instead of holding them. The connections are closed when data
	// sent stays unacknowledged for 60 s (tcp_user_timeout, in ms) or 3
	// keepalive probes, 10 s apart after 30 s of silence, go unanswered
	// (keepalives_idle, keepalives_interval, keepalives_count, keepalives):
	// a silent network fails the request instead of holding it.
	URL string
	// Pool, when set, is used as is: Open neither configures it nor closes
	// it on Close, and gives its connections none of URL's defaults above
	// (connect timeout, keepalives, TCP user timeout): set them in its
	// ConnConfig (ConnectTimeout, DialFunc) when a silent network must not
	// hold requests. Its connections' search_path selects the schema.
	// Through a transaction-mode pooler its ConnConfig needs a
	// DefaultQueryExecMode without named statements (cache_describe);
	// Open logs a warning when it finds a pooler and the statement cache.
	// Its ShouldPing is kept: a pool Open creates also pings, before
	// handing it out, a connection idle since a lost connection was seen
	// (retry.go), which a given pool does not.
	Pool *pgxpool.Pool
	// ListenURL is the connection string of the dedicated connection that
	// [Store.ListenCommits] opens for LISTEN. It must reach Postgres
	// directly or through a session-mode pooler: a transaction pooler
	// (PgBouncer pool_mode=transaction, and the like) does not deliver
	// notifications. Point URL at the pooler and ListenURL past it. Default:
	// the connection settings of the pool's connections (URL, or Pool's
	// ConnConfig; Pool's BeforeConnect and AfterConnect hooks do not run
	// for it, so a pool that needs them for credentials needs ListenURL).
	// Its search_path does not matter. Without application_name in it, the
	// connection is named "syncgo-listen-<process id>".
	ListenURL string
	// Logger receives the driver's few log lines (migrations, a slow-scan
	// warning). Default: discard.
	Logger *slog.Logger
	// MaxConns bounds the pool that Open creates from URL; a Write holds
	// one connection for its whole transaction. Default: pool_max_conns
	// when URL sets it, else twice GOMAXPROCS and at least 6. Fewer
	// backends at work at once cost the database less CPU per commit than
	// many waiting on each other's locks: on two cores a pool of 6 took a
	// quarter less backend CPU per pushed commit than one of 16 (64
	// clients, BENCHMARKS.md).
	MaxConns int32
	// MinConns is how many connections the pool that Open creates opens
	// at once, in the background, and keeps open while idle (capped at
	// the pool's size); pool_min_conns in URL overrides it. Default 0:
	// connections open as requests need them. A long-running server sets
	// it so that the first requests after a start do not each wait for a
	// connection to be made (a cold bootstrap of 100,000 rows on a fresh
	// server: 303 -> 271 ms with 4, BENCHMARKS.md).
	MinConns int32
	// MaxChangesPerStatement bounds the changes (and scope index entries)
	// written by one statement of an append; larger commits are split into
	// several statements of the same round trip. Default and maximum: 4096.
	MaxChangesPerStatement int
	// MaxBatch bounds the Write calls of one partition that share a
	// transaction (group commit: each in a savepoint of its own, one
	// COMMIT for all). Default: 32, which keeps a batch's subtransactions
	// within the 64 that Postgres tracks per backend without overflowing.
	MaxBatch int
	// BatchWait is how long the leader of a partition's batch waits for
	// more Write calls before it starts a batch with fewer than MaxBatch.
	// Default 0: a batch takes the calls that queued while the previous
	// one ran, which groups concurrent writers without delaying a lone
	// one.
	BatchWait time.Duration
	// ReadOnly opens the store without writing anything: Open reads the
	// catalog but applies no DDL (even when the core tables are missing or
	// older), and every call that would write (Write, EnsureSchema when it
	// would create or migrate, Upgrade, the partition, client and
	// checkpoint updates) fails with ErrReadOnly. Reads, the serve gate,
	// PlanSchema and an EnsureSchema that only checks work. A pool that
	// Open creates from URL also sets default_transaction_read_only, so
	// Postgres refuses writes as well. For operator commands that report
	// (syncgo schema).
	ReadOnly bool

	// migrationLocked, when set (by the package's tests), is called by a
	// schema bump right after its first statement, the migration lock,
	// with the lock held.
	migrationLocked func()
}

// Defaults of [Config].
const (
	minDefaultMaxConns = 6
	// defaultConnectTimeout bounds the making of a pool connection when
	// URL sets no connect_timeout.
	defaultConnectTimeout    = 10 * time.Second
	maxChangesPerStatement   = 4096
	defaultWindowPageCommits = 1024
	defaultMaxBatch          = 32
)

// withDefaults returns c with every unset field at its default, in one
// place.
func (c Config) withDefaults() Config {
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	if c.MaxConns <= 0 {
		c.MaxConns = int32(max(minDefaultMaxConns, 2*runtime.GOMAXPROCS(0)))
	}
	if c.MaxBatch <= 0 {
		c.MaxBatch = defaultMaxBatch
	}
	if c.BatchWait < 0 {
		c.BatchWait = 0
	}
	if c.MaxChangesPerStatement <= 0 || c.MaxChangesPerStatement > maxChangesPerStatement {
		c.MaxChangesPerStatement = maxChangesPerStatement
	}
	return c
}
