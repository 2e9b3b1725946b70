package pgstore

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/syncgo/syncgo/store"
	"github.com/syncgo/syncgo/store/storetest"
)

// testStore is a Store with the suite's test hooks: a second store on the
// same Postgres schema (storetest.Reopener) and raw SQL
// (storetest.RawExecer).
type testStore struct {
	*Store
	schemaName string
}

var (
	_ storetest.Reopener  = testStore{}
	_ storetest.RawExecer = testStore{}
)

// openTest opens a store on a fresh schema.
func openTest(tb testing.TB) store.Store {
	tb.Helper()
	name := newSchema(tb)
	return testStore{openIn(tb, name, Config{}), name}
}

// Reopen opens another store on the same schema, with a pool of its own,
// as another server process would.
func (s testStore) Reopen(tb testing.TB) store.Store {
	tb.Helper()
	return testStore{openIn(tb, s.schemaName, Config{}), s.schemaName}
}

// ExecRaw runs a script of one or more statements in one transaction (the
// simple protocol, which takes several statements): all or none.
func (s testStore) ExecRaw(ctx context.Context, script string) error {
	return pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		_, err := tx.Exec(ctx, script)
		return err
	})
}

// TestConformance runs the storage contract's suite, each test on a fresh
// Postgres schema.
func TestConformance(t *testing.T) {
	testURL(t)
	storetest.Run(t, openTest)
}
