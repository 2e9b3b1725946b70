package pgstore

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
)

// Lost connections. When Postgres ends a backend (pg_terminate_backend, a
// restart, a failover, a pooler's restart), the statement on it fails, and
// so does the next one sent on each of the pool's idle connections to it:
// they are dead too, but the pool learns it only by using them. An
// operation that failed that way (connLost) runs again on another
// connection, at most maxConnRetries times, within the caller's context:
//
//   - A read (retrying) is always safe to run again.
//   - A statement that writes on its own (reaction statements among
//     them) is run again only when it is safe to: it was never sent, or
//     the server's answer to it was that it ended the session, so it did
//     not commit (retryingWrite).
//   - A Write's transaction is run again from the start (group.go,
//     runLive), unless the COMMIT itself may have been carried out.
//
// The pool destroys a connection that failed; and once a lost connection
// is seen, a connection idle since before it is pinged before it is
// handed out (shouldPing), so that the run again does not land on another
// dead one.

// maxConnRetries bounds the runs again after a lost connection.
const maxConnRetries = 2

// noteLost records that a lost connection was seen now.
func (s *Store) noteLost() { s.lostAt.Store(time.Now().UnixNano()) }

// shouldPing is the pool's ShouldPing: a connection idle for over a
// second (pgxpool's default), or since before a lost connection was last
// seen, is pinged before it is handed out, and destroyed if that fails.
func (s *Store) shouldPing(_ context.Context, p pgxpool.ShouldPingParams) bool {
	if p.IdleDuration > time.Second {
		return true
	}
	lost := s.lostAt.Load()
	return lost != 0 && time.Now().Add(-p.IdleDuration).UnixNano() <= lost
}

// retried counts and logs a run again of what after err.
func (s *Store) retried(ctx context.Context, what string, attempt int, err error) {
	s.connRetries.Add(1)
	s.log.WarnContext(ctx, "pgstore: the database connection was lost; running again on another connection",
		"op", what, "attempt", attempt+1, "err", err)
}

// retrying runs the read fn, and again after a lost connection (see "Lost
// connections"). It returns fn's last error.
func (s *Store) retrying(ctx context.Context, what string, fn func() error) error {
	for attempt := 0; ; attempt++ {
		err := fn()
		if err == nil || !connLost(err) {
			return err
		}
		s.noteLost()
		if attempt == maxConnRetries || ctx.Err() != nil {
			return err
		}
		s.retried(ctx, what, attempt, err)
	}
}

// retryingWrite runs fn, a statement that writes in a transaction of its
// own, and again when it failed on a lost connection before it could have
// committed: never sent, or answered by the server's end of the session.
func (s *Store) retryingWrite(ctx context.Context, what string, fn func() error) error {
	for attempt := 0; ; attempt++ {
		err := fn()
		if err == nil || !connLost(err) {
			return err
		}
		s.noteLost()
		if attempt == maxConnRetries || ctx.Err() != nil || !writeNotRun(err) {
			return err
		}
		s.retried(ctx, what, attempt, err)
	}
}

// writeNotRun reports whether the statement that failed with err (a lost
// connection) certainly did not commit.
func writeNotRun(err error) bool { return safeToRetry(err) || serverEnded(err) }

// retry is retrying for a read with a result.
func retry[T any](s *Store, ctx context.Context, what string, fn func() (T, error)) (T, error) {
	var v T
	err := s.retrying(ctx, what, func() error {
		var err error
		v, err = fn()
		return err
	})
	return v, err
}

// retryWrite is retryingWrite for a statement with a result.
func retryWrite[T any](s *Store, ctx context.Context, what string, fn func() (T, error)) (T, error) {
	var v T
	err := s.retryingWrite(ctx, what, func() error {
		var err error
		v, err = fn()
		return err
	})
	return v, err
}
