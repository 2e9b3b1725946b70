package pgstore

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
)

// Partitions lists every partition the database knows, with a registry
// entry or a log, in bytewise order: what an operator rotates after a
// restore.
func (s *Store) Partitions(ctx context.Context) ([]string, error) {
	return retry(s, ctx, "Partitions", func() ([]string, error) { return s.partitionsOnce(ctx) })
}

// partitionsOnce is Partitions, once (see "Lost connections", retry.go).
func (s *Store) partitionsOnce(ctx context.Context) ([]string, error) {
	if err := s.check(); err != nil {
		return nil, err
	}
	rows, err := s.pool.Query(ctx, `SELECT partition FROM (SELECT partition FROM sync_partition_registry UNION SELECT partition FROM sync_partitions) p ORDER BY partition COLLATE "C"`)
	if err != nil {
		return nil, fmt.Errorf("list partitions: %w", err)
	}
	out, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, fmt.Errorf("list partitions: %w", err)
	}
	return out, nil
}

// Session is another client connection to the database, as
// pg_stat_activity shows it.
type Session struct {
	PID             int32
	ApplicationName string
	ClientAddr      string
	State           string
}

// OtherSessions lists the client connections to the database of url other
// than its own: a running syncgo process holds at least its listening
// connection (application_name syncgo-listen-<pid> unless the URL names
// one). Sessions of other applications, or of other deployments in other
// schemas of the same database, are listed too: Postgres cannot tell which
// schema a session uses.
func OtherSessions(ctx context.Context, url string) ([]Session, error) {
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		return nil, err
	}
	defer conn.Close(ctx)
	// One statement, sent unnamed: it runs through a pooler too.
	rows, err := conn.Query(ctx, `SELECT pid, COALESCE(application_name, ''), COALESCE(host(client_addr), 'local'), COALESCE(state, '')
FROM pg_stat_activity
WHERE datname = current_database() AND pid <> pg_backend_pid() AND backend_type = 'client backend'
ORDER BY pid`, pgx.QueryExecModeSimpleProtocol)
	if err != nil {
		return nil, fmt.Errorf("read pg_stat_activity: %w", err)
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (Session, error) {
		var s Session
		err := r.Scan(&s.PID, &s.ApplicationName, &s.ClientAddr, &s.State)
		return s, err
	})
}
