package conformance

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"time"

	// The SQLite library sqlitestore uses; a backup opens its own
	// connection.
	"zombiezen.com/go/sqlite"
	"zombiezen.com/go/sqlite/sqlitex"

	"github.com/syncgo/syncgo/sqlitestore"
)

// databases makes an instance's databases and their backups: SQLite files
// (sqliteDatabases) or Postgres schemas (pgDatabases).
type databases interface {
	// open opens a new database: an empty one when from is empty, else a
	// copy of the backup that backup named from. The caller closes it.
	open(ctx context.Context, from string) (backing, error)
	// backup snapshots everything committed to the database that open
	// returned last and names the snapshot.
	backup(ctx context.Context) (string, error)
	// remove deletes every database and backup made, once all are closed.
	remove() error
}

// sqliteDatabases keeps an instance's databases as files of a directory of
// its own. They are throw-away databases like sqlitestore.MemoryPath
// (synchronous off, removed with the instance), at paths the instance
// knows so that they can be backed up.
type sqliteDatabases struct {
	logger     *slog.Logger
	dir        string
	generation int    // database files opened so far
	live       string // the file open returned last
}

func newSQLiteDatabases(logger *slog.Logger) (*sqliteDatabases, error) {
	dir, err := os.MkdirTemp("", "syncgo-conformance-")
	if err != nil {
		return nil, err
	}
	return &sqliteDatabases{logger: logger, dir: dir}, nil
}

func (d *sqliteDatabases) open(ctx context.Context, from string) (backing, error) {
	d.generation++
	path := filepath.Join(d.dir, "sync-"+strconv.Itoa(d.generation)+".db")
	if from != "" {
		if err := copyFile(from, path); err != nil {
			return nil, fmt.Errorf("restore backup: %w", err)
		}
	}
	st, err := sqlitestore.Open(ctx, sqlitestore.Config{Path: path, Logger: d.logger, Synchronous: "OFF"})
	if err != nil {
		return nil, err
	}
	d.live = path
	return st, nil
}

// backup writes a consistent copy of the live file with VACUUM INTO.
func (d *sqliteDatabases) backup(ctx context.Context) (string, error) {
	dst := filepath.Join(d.dir, "backup.db")
	if err := os.Remove(dst); err != nil && !errors.Is(err, os.ErrNotExist) {
		return "", err
	}
	conn, err := sqlite.OpenConn(d.live, sqlite.OpenReadWrite)
	if err != nil {
		return "", err
	}
	defer conn.Close()
	conn.SetBusyTimeout(5 * time.Second)
	if ctx.Done() != nil {
		conn.SetInterrupt(ctx.Done())
		defer conn.SetInterrupt(nil)
	}
	if err := sqlitex.Execute(conn, "VACUUM INTO ?", &sqlitex.ExecOptions{Args: []any{dst}}); err != nil {
		return "", err
	}
	return dst, nil
}

func (d *sqliteDatabases) remove() error { return os.RemoveAll(d.dir) }

// captureBackup snapshots the current database.
func (in *instance) captureBackup(ctx context.Context) error {
	in.backupMu.Lock()
	defer in.backupMu.Unlock()
	name, err := in.dbs.backup(ctx)
	if err != nil {
		return fmt.Errorf("capture backup: %w", err)
	}
	in.backupName = name
	return nil
}

// restoreBackup replaces the instance's database with a copy of the
// captured one and rotates the partition log epoch (§2.1), as a host
// restoring a backup must: clients that saw the lost commits reset.
func (in *instance) restoreBackup(ctx context.Context) error {
	in.backupMu.Lock()
	defer in.backupMu.Unlock()
	if in.backupName == "" {
		return &callError{status: http.StatusConflict, msg: "captureBackup must run before restoreBackup"}
	}
	st, err := in.dbs.open(ctx, in.backupName)
	if err != nil {
		return err
	}
	err = st.EnsureSchema(ctx, in.schema)
	if err == nil {
		err = st.RotateLogEpoch(ctx, in.partition, newEpoch(), in.nowMs.Load())
	}
	if err != nil {
		st.Close()
		return fmt.Errorf("restore backup: %w", err)
	}
	in.store.swap(st)
	return nil
}

func newEpoch() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

func copyFile(from, to string) error {
	src, err := os.Open(from)
	if err != nil {
		return err
	}
	defer src.Close()
	dst, err := os.Create(to)
	if err != nil {
		return err
	}
	if _, err := io.Copy(dst, src); err != nil {
		dst.Close()
		return err
	}
	return dst.Close()
}
