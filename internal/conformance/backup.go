package conformance

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"time"

	// The SQLite library sqlitestore uses; captureBackup opens its own
	// connection.
	"zombiezen.com/go/sqlite"
	"zombiezen.com/go/sqlite/sqlitex"

	"github.com/syncgo/syncgo/sqlitestore"
)

// openStore opens a database file of the instance directory: a new empty
// one when from is empty, else a copy of from. It is a throw-away database
// like sqlitestore.MemoryPath (synchronous off, removed with the
// instance), at a path the instance knows so that it can be backed up.
func (in *instance) openStore(ctx context.Context, from string) (*sqlitestore.Store, error) {
	in.generation++
	path := filepath.Join(in.dir, "sync-"+strconv.Itoa(in.generation)+".db")
	if from != "" {
		if err := copyFile(from, path); err != nil {
			return nil, fmt.Errorf("restore backup: %w", err)
		}
	}
	st, err := sqlitestore.Open(ctx, sqlitestore.Config{Path: path, Logger: in.logger, Synchronous: "OFF"})
	if err != nil {
		return nil, err
	}
	in.livePath = path
	return st, nil
}

// captureBackup snapshots the current database: VACUUM INTO writes a
// consistent copy of everything committed so far.
func (in *instance) captureBackup(ctx context.Context) error {
	in.backupMu.Lock()
	defer in.backupMu.Unlock()
	dst := filepath.Join(in.dir, "backup.db")
	if err := os.Remove(dst); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	conn, err := sqlite.OpenConn(in.livePath, sqlite.OpenReadWrite)
	if err != nil {
		return fmt.Errorf("capture backup: %w", err)
	}
	defer conn.Close()
	conn.SetBusyTimeout(5 * time.Second)
	if ctx.Done() != nil {
		conn.SetInterrupt(ctx.Done())
		defer conn.SetInterrupt(nil)
	}
	if err := sqlitex.Execute(conn, "VACUUM INTO ?", &sqlitex.ExecOptions{Args: []any{dst}}); err != nil {
		return fmt.Errorf("capture backup: %w", err)
	}
	in.backupPath = dst
	return nil
}

// restoreBackup replaces the instance's database with a copy of the
// captured one and rotates the partition log epoch (§2.1), as a host
// restoring a backup must: clients that saw the lost commits reset.
func (in *instance) restoreBackup(ctx context.Context) error {
	in.backupMu.Lock()
	defer in.backupMu.Unlock()
	if in.backupPath == "" {
		return &callError{status: http.StatusConflict, msg: "captureBackup must run before restoreBackup"}
	}
	st, err := in.openStore(ctx, in.backupPath)
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
