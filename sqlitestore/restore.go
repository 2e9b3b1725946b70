package sqlitestore

import (
	"context"
	"fmt"
	"os"
	"time"

	"zombiezen.com/go/sqlite"

	"github.com/syncgo/syncgo/store"
)

// Partitions lists every partition the database knows, with a registry
// entry or a log, in bytewise order: what an operator rotates after a
// restore.
func (s *Store) Partitions(ctx context.Context) ([]string, error) {
	if s.closed.Load() {
		return nil, store.ErrClosed
	}
	var out []string
	err := s.read(ctx, func(c *conn) error {
		rows, err := c.query(`SELECT partition FROM sync_partition_registry UNION SELECT partition FROM sync_partitions ORDER BY 1`)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var p string
			if err := rows.Scan(&p); err != nil {
				return err
			}
			out = append(out, p)
		}
		return rows.Err()
	})
	if err != nil {
		return nil, fmt.Errorf("list partitions: %w", err)
	}
	return out, nil
}

// InUse reports whether another connection, of this process or another,
// has the database file at path open: a running server keeps its
// connections open, and a connection in exclusive locking mode cannot
// lock the file while any other is open (in WAL mode too). It opens the
// file read-write without creating it, holds the lock only for the check
// and writes nothing. A missing file is an error.
func InUse(path string) (bool, error) {
	if _, err := os.Stat(path); err != nil {
		return false, err
	}
	c, err := sqlite.OpenConn(path, sqlite.OpenReadWrite)
	if err != nil {
		return false, err
	}
	defer c.Close()
	// Busy at once: a running server's connections stay open.
	c.SetBusyTimeout(100 * time.Millisecond)
	for _, stmt := range []string{"PRAGMA locking_mode=EXCLUSIVE", "BEGIN EXCLUSIVE", "SELECT count(*) FROM sqlite_master", "ROLLBACK"} {
		st, _, err := c.PrepareTransient(stmt)
		if err == nil {
			for {
				var more bool
				if more, err = st.Step(); err != nil || !more {
					break
				}
			}
			st.Finalize()
		}
		if code := sqlite.ErrCode(err); code.ToPrimary() == sqlite.ResultBusy || code.ToPrimary() == sqlite.ResultLocked {
			return true, nil
		}
		if err != nil {
			return false, err
		}
	}
	return false, nil
}
