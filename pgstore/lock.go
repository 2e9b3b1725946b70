package pgstore

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// Every transaction of the driver that runs DDL (the core tables at Open,
// a schema bump, Upgrade) runs in withMigrationLock, which takes its locks
// in the order that doc.go documents:
//
//  1. the migration lock, an advisory transaction lock of the database
//     schema, waited for without a timeout: the transaction holds nothing
//     yet, and another process may be migrating for a while;
//  2. SET LOCAL lock_timeout (migrationLockTimeout) for everything after;
//  3. LOCK TABLE sync_partitions IN EXCLUSIVE MODE, when the table exists:
//     it waits for the writers inside (every Write, prune and activation
//     holds a sync_partitions row lock from its first statement) and
//     blocks new ones at their first statement, where they hold nothing;
//  4. the core tables in the migrations' order, then the app tables in the
//     schema's order, then rows, logged changes, the marker, checkpoints
//     and fences.
//
// A lock that cannot be had within the timeout, or a deadlock that
// Postgres breaks by failing this transaction (SQLSTATE 55P03, 40P01),
// rolls everything back and the whole transaction is retried with
// jittered backoff, for up to migrationRetryBudget: the DDL gives way,
// never the writers and readers it would have waited for. The timeout is
// shorter than Postgres's default deadlock_timeout (1 s), so in a cycle the
// migration's wait ends first.

// Migration lock settings.
const (
	migrationLockTimeout = 500 * time.Millisecond
	migrationRetryMin    = 50 * time.Millisecond
	migrationRetryMax    = 2 * time.Second
	migrationRetryBudget = 2 * time.Minute
)

// SQLSTATEs of a migration that gives way.
const (
	sqlstateLockNotAvailable = "55P03"
	sqlstateDeadlockDetected = "40P01"
)

// sqlExcludeWriters is step 3 of the lock order; on a database without
// core tables yet there is nothing to exclude.
const sqlExcludeWriters = `DO $$
BEGIN
  IF to_regclass('sync_partitions') IS NOT NULL THEN
    LOCK TABLE sync_partitions IN EXCLUSIVE MODE;
  END IF;
END
$$`

// withMigrationLock runs fn in a transaction that holds the migration
// locks (see above), retrying the whole transaction when a lock wait timed
// out or deadlocked. fn must read what it decides on inside the
// transaction, since it may run more than once.
func (s *Store) withMigrationLock(ctx context.Context, what string, fn func(ctx context.Context, tx pgx.Tx) error) error {
	deadline := time.Now().Add(migrationRetryBudget)
	backoff := migrationRetryMin
	for attempt := 1; ; attempt++ {
		err := s.migrationTx(ctx, fn)
		if err == nil || !lockGaveWay(err) || time.Now().After(deadline) {
			return err
		}
		wait := backoff/2 + rand.N(backoff)
		s.log.InfoContext(ctx, "pgstore: migration gave way to a lock; retrying", "what", what, "attempt", attempt,
			"wait", wait, "err", err)
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return fmt.Errorf("%w (after: %v)", ctx.Err(), err)
		case <-t.C:
		}
		backoff = min(2*backoff, migrationRetryMax)
	}
}

// migrationTx is one attempt of withMigrationLock.
func (s *Store) migrationTx(ctx context.Context, fn func(ctx context.Context, tx pgx.Tx) error) error {
	conn, err := s.pool.Acquire(ctx)
	if err != nil {
		return fmt.Errorf("acquire connection: %w", err)
	}
	defer conn.Release()
	return pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, sqlMigrationLock); err != nil {
			return fmt.Errorf("migration lock: %w", err)
		}
		timeout := "SET LOCAL lock_timeout = '" + strconv.FormatInt(migrationLockTimeout.Milliseconds(), 10) + "ms'"
		if _, err := tx.Exec(ctx, timeout); err != nil {
			return fmt.Errorf("lock timeout: %w", err)
		}
		if _, err := tx.Exec(ctx, sqlExcludeWriters); err != nil {
			return fmt.Errorf("lock sync_partitions: %w", err)
		}
		return fn(ctx, tx)
	})
}

// lockGaveWay reports whether err is a lock wait that timed out or a
// deadlock that Postgres broke.
func lockGaveWay(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && (pgErr.Code == sqlstateLockNotAvailable || pgErr.Code == sqlstateDeadlockDetected)
}
