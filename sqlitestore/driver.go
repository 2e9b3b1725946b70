package sqlitestore

import (
	"database/sql"
	"errors"
	"fmt"
	"net/url"
	"slices"
	"strings"

	sqlite3 "github.com/mattn/go-sqlite3"
)

// driverName is the database/sql driver this package uses; see
// docs/sqlite-driver.md for why.
const driverName = "sqlite3"

// openDB opens a database/sql handle on path with the connection settings
// of cfg. Read handles are query-only.
func openDB(path string, cfg Config, readOnly bool) (*sql.DB, error) {
	q := url.Values{}
	q.Set("_busy_timeout", fmt.Sprint(cfg.BusyTimeoutMs))
	q.Set("_journal_mode", "WAL")
	q.Set("_synchronous", cfg.Synchronous)
	q.Set("_foreign_keys", "0")
	if readOnly {
		q.Set("_query_only", "1")
	}
	dsn := "file:" + (&url.URL{Path: path}).EscapedPath() + "?" + q.Encode()
	db, err := sql.Open(driverName, dsn)
	if err != nil {
		return nil, err
	}
	return db, nil
}

// isUniqueViolation reports a UNIQUE or PRIMARY KEY constraint failure.
func isUniqueViolation(err error) bool {
	var se sqlite3.Error
	if errors.As(err, &se) {
		return se.ExtendedCode == sqlite3.ErrConstraintUnique || se.ExtendedCode == sqlite3.ErrConstraintPrimaryKey
	}
	return false
}

// isFenceRejection reports the writer-fence trigger's abort.
func isFenceRejection(err error) bool {
	return err != nil && strings.Contains(err.Error(), "sync.storage.writer_fence_rejected")
}

// violatedIndex names the declared unique index a constraint error is
// about. SQLite reports the columns ("UNIQUE constraint failed: t.a, t.b"),
// so the index is found by its column list.
func violatedIndex(t *tableSQL, err error) string {
	_, list, ok := strings.Cut(err.Error(), "constraint failed: ")
	if !ok {
		return "unique"
	}
	var cols []string
	for _, c := range strings.Split(list, ",") {
		c = strings.TrimSpace(c)
		if _, col, ok := strings.Cut(c, "."); ok {
			c = col
		}
		if c != "_sync_partition" {
			cols = append(cols, c)
		}
	}
	for _, ix := range t.t.Indexes() {
		if ix.Unique && slices.Equal(ix.Columns, cols) {
			return ix.PhysicalName
		}
	}
	return "unique"
}
