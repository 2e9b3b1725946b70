package store

import "context"

// The SQL dialects of RemoteTarget.
const (
	DialectSQLite   = "sqlite"
	DialectPostgres = "postgres"
)

// RemoteTarget says how a driver's tables are spelled in SQL: its dialect
// and the schema that qualifies its physical tables ("main" for SQLite,
// the connections' current schema for Postgres).
type RemoteTarget struct {
	Dialect string
	Schema  string
}

// RemoteStatement is a composed remote query (REMOTE.md §2): SQL in the
// driver's dialect, with positional parameters, that reads application
// rows through partition-bound derived relations (package
// internal/remotesql composes it). Its first argument is the partition.
type RemoteStatement struct {
	SQL  string
	Args []any
	// NoCommitSeq skips the read of the partition's maxCommitSeq (the
	// result's MaxCommitSeq is 0): for a caller that does not need it.
	NoCommitSeq bool
	// ServeGate also reads the partition's serve gate at the running
	// schema version Running, in the same snapshot as the rows
	// (RemoteResult.Gate): a caller that decides on it serves no row that
	// the gate would refuse. A store without the migration barrier
	// ignores it.
	ServeGate bool
	Running   int32
}

// RemoteResult is what a remote query read: the result's column names and
// rows, and the partition's newest commit sequence, all in one database
// snapshot.
type RemoteResult struct {
	Columns []string
	// Rows hold the driver's values: nil, int64, float64, string, []byte,
	// bool, and on Postgres whatever pgx decodes other types to.
	Rows         [][]any
	MaxCommitSeq int64
	// Gate is the serve gate read with the rows (RemoteStatement.ServeGate);
	// nil when not asked for.
	Gate *ServeGate
}

// RemoteQuerier is implemented by stores that run the registered queries
// of remote operations. The statement runs read-only; a store without it
// answers operation.storage_unsupported.
type RemoteQuerier interface {
	// RemoteTarget returns the dialect and the table qualifier.
	RemoteTarget() RemoteTarget
	// RemoteQuery runs a statement and reads the partition's
	// maxCommitSeq in the same snapshot. A statement that fails in the
	// database is returned as the database's error.
	RemoteQuery(ctx context.Context, partition string, st RemoteStatement) (RemoteResult, error)
}
