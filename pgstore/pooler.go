package pgstore

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
)

// behindPooler reports whether conn reaches Postgres through a connection
// pooler (PgBouncer, Supavisor, RDS Proxy and the like): the process id
// that the server end announced when the connection started is not the
// id of the backend that runs its statements. A pooler announces an id of
// its own, since the backend behind a client may change from one
// transaction to the next; Postgres itself, or a plain TCP proxy in
// front of it, announces the backend's.
func behindPooler(ctx context.Context, conn *pgx.Conn) (bool, error) {
	var pid int64
	if err := conn.QueryRow(ctx, "SELECT pg_backend_pid()", pgx.QueryExecModeSimpleProtocol).Scan(&pid); err != nil {
		return false, fmt.Errorf("backend pid: %w", err)
	}
	return pid != int64(conn.PgConn().PID()), nil
}

// detectPooler opens one connection with cc's settings and reports
// whether it goes through a connection pooler (behindPooler).
func detectPooler(ctx context.Context, cc *pgx.ConnConfig) (bool, error) {
	conn, err := pgx.ConnectConfig(ctx, cc.Copy())
	if err != nil {
		return false, fmt.Errorf("connect: %w", err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	return behindPooler(ctx, conn)
}

// pooledExecMode is how the pool sends statements when a pooler stands
// in front of Postgres and the URL names no default_query_exec_mode:
// unnamed statements whose descriptions pgx caches. A transaction-mode
// pooler hands a client's transactions to any of its server connections,
// so a named prepared statement (pgx's default statement cache) that one
// connection prepared is missing on, or collides with another client's
// on, the next; an unnamed statement is parsed in the same round trip
// that runs it. It costs Postgres a parse and plan per statement: about a
// quarter of the push rate on a direct connection (docs/deployment.md).
const pooledExecMode = pgx.QueryExecModeCacheDescribe

// checkGivenPool warns when a pool the embedder gave (Config.Pool) reaches
// Postgres through a connection pooler and sends named prepared
// statements: behind a transaction-mode pooler they fail at random (a
// session-mode pooler is fine). Open configures its own pools itself.
func (s *Store) checkGivenPool(ctx context.Context) {
	if s.pool.Config().ConnConfig.DefaultQueryExecMode != pgx.QueryExecModeCacheStatement {
		return
	}
	c, err := s.pool.Acquire(ctx)
	if err != nil {
		return // Open's first statement reports it
	}
	defer c.Release()
	if pooled, err := behindPooler(ctx, c.Conn()); err == nil && pooled {
		s.log.WarnContext(ctx, "pgstore: the pool reaches Postgres through a connection pooler and sends named prepared statements (pgx's statement cache); behind a transaction-mode pooler they fail, so set its ConnConfig.DefaultQueryExecMode to pgx.QueryExecModeCacheDescribe")
	}
}
