package sqlitestore

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/syncgo/syncgo/internal/rowbuf"
	"github.com/syncgo/syncgo/store"
	"github.com/syncgo/syncgo/store/storetest"
	"github.com/syncgo/syncgo/wire"
)

// seedScan writes n tasks r000.. to partition p, row i in project
// project(i).
func seedScan(t *testing.T, s testStore, n int, project func(i int) string) {
	t.Helper()
	ctx := t.Context()
	if err := s.EnsureSchema(ctx, storetest.FixtureSchema(t)); err != nil {
		t.Fatal(err)
	}
	if _, err := s.TouchPartition(ctx, "p", 1, "epoch-p"); err != nil {
		t.Fatal(err)
	}
	err := s.Write(ctx, "p", func(ctx context.Context, tx store.WriteTx) error {
		for i := range n {
			title := "row"
			w := storetest.Task{ID: fmt.Sprintf("r%03d", i), ProjectID: project(i), Title: &title}.RowWrite(t, 1)
			if err := tx.UpsertRow(ctx, w); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// A scan of one value reads the value's index entries and the table's
// rows side by side while the value holds most of the rows, and gives up
// for the join once the rows outside it outnumber those in it; either way
// the pages are the value's rows in row-id order.
func TestScanDense(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name     string
		project  func(i int) string
		complete bool // the dense read of the first page completes
	}{
		{"whole table", func(int) string { return "a" }, true},
		{"most rows", func(i int) string { return map[bool]string{true: "b", false: "a"}[i%7 == 3] }, true},
		{"sparse", func(i int) string { return map[bool]string{true: "a", false: "b"}[i%10 == 0] }, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			s := openPath(t, filepath.Join(t.TempDir(), "sync.db"))
			const n, limit = 400, 50
			seedScan(t, s, n, c.project)
			var want []string
			for i := range n {
				if c.project(i) == "a" {
					want = append(want, fmt.Sprintf("r%03d", i))
				}
			}
			ts, err := s.table(storetest.TableTasks)
			if err != nil {
				t.Fatal(err)
			}
			q := store.RowScanQuery{Table: storetest.TableTasks, Scopes: wire.ScopeMap{{Key: storetest.VarProject, Values: []string{"a"}}}, Limit: limit, NoScopes: true}
			var (
				got      int
				complete bool
			)
			err = s.readTxOn(t.Context(), s.scanners, func(c *conn) error {
				var rb rowbuf.Buffer
				var err error
				got, complete, err = scanDense(c, ts, "p", q, storetest.VarProject, "a", "", limit, &rb)
				for i, r := range rb.Rows() {
					if r.RowID != want[i] {
						return fmt.Errorf("dense row %d = %s, want %s", i, r.RowID, want[i])
					}
				}
				return err
			})
			if err != nil {
				t.Fatal(err)
			}
			if complete != c.complete || complete && got != limit {
				t.Errorf("scanDense of the first page: %d rows, complete %v; want complete %v (and %d rows)", got, complete, c.complete, limit)
			}
			for _, noScopes := range []bool{true, false} {
				q.NoScopes = noScopes
				var ids []string
				for q.After = nil; ; {
					page, err := s.ScanRows(t.Context(), "p", q)
					if err != nil {
						t.Fatal(err)
					}
					for _, r := range page {
						ids = append(ids, r.RowID)
						if !noScopes && r.Scopes == nil {
							t.Fatalf("row %s read without its scopes", r.RowID)
						}
					}
					if len(page) < limit {
						break
					}
					q.After = &page[len(page)-1].RowID
				}
				if !slices.Equal(ids, want) {
					t.Errorf("NoScopes %v: ScanRows pages = %d rows %v..., want %d rows", noScopes, len(ids), ids[:min(5, len(ids))], len(want))
				}
			}
		})
	}
}

// The dense read's statements walk the scope key alone and the table's
// primary key in order: no temporary b-tree, no probe per row.
func TestScanDensePlans(t *testing.T) {
	t.Parallel()
	s := openPath(t, filepath.Join(t.TempDir(), "sync.db"))
	if err := s.EnsureSchema(t.Context(), storetest.FixtureSchema(t)); err != nil {
		t.Fatal(err)
	}
	ts, err := s.table(storetest.TableTasks)
	if err != nil {
		t.Fatal(err)
	}
	for _, q := range []struct {
		sql, want string
		args      []any
	}{
		{scanIDsSQL, "SEARCH sync_row_scopes USING COVERING INDEX sqlite_autoindex_sync_row_scopes_1 (partition=? AND tbl=? AND var=? AND value=? AND row_id>?)",
			[]any{"p", "tasks", "project_id", "a", "", int64(10)}},
		{ts.scanRange, "SEARCH tasks USING INDEX sqlite_autoindex_tasks_1 (_sync_partition=? AND _sync_row_id>?)", []any{"p", ""}},
		{ts.scanRangeLean, "SEARCH tasks USING INDEX sqlite_autoindex_tasks_1 (_sync_partition=? AND _sync_row_id>?)", []any{"p", ""}},
	} {
		if got := strings.Join(queryPlan(t, s, q.sql, q.args...), "\n"); got != q.want {
			t.Errorf("plan of\n%s\n= %q, want %q", q.sql, got, q.want)
		}
	}
}

// An index entry whose row is missing (the join skips it) ends the dense
// read; the join reads on from the last row found, and the page is what
// the join alone would return.
func TestScanDenseEntryWithoutRow(t *testing.T) {
	t.Parallel()
	s := openPath(t, filepath.Join(t.TempDir(), "sync.db"))
	seedScan(t, s, 100, func(int) string { return "a" })
	if err := s.ExecRaw(t.Context(), `DELETE FROM tasks WHERE _sync_row_id = 'r005'`); err != nil {
		t.Fatal(err)
	}
	q := store.RowScanQuery{Table: storetest.TableTasks, Scopes: wire.ScopeMap{{Key: storetest.VarProject, Values: []string{"a"}}}, Limit: 20, NoScopes: true}
	page, err := s.ScanRows(t.Context(), "p", q)
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, r := range page {
		ids = append(ids, r.RowID)
	}
	var want []string
	for i := range 21 {
		if i != 5 {
			want = append(want, fmt.Sprintf("r%03d", i))
		}
	}
	if !slices.Equal(ids, want) {
		t.Errorf("ScanRows = %v, want %v", ids, want)
	}
}

// A read transaction cancelled before it ends (its ROLLBACK interrupted)
// leaves no transaction open on the connection it gives back: the next
// read transaction on it begins.
func TestReadTxAfterCancel(t *testing.T) {
	t.Parallel()
	s, err := Open(t.Context(), Config{Path: filepath.Join(t.TempDir(), "sync.db"), ReadConns: 1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	ctx, cancel := context.WithCancel(t.Context())
	err = s.readTxOn(ctx, s.scanners, func(c *conn) error {
		cancel()
		<-c.intr // the interrupt is installed: the ROLLBACK runs interrupted
		return context.Canceled
	})
	if err == nil {
		t.Fatal("the cancelled read transaction succeeded")
	}
	for range 2 {
		if err := s.readTxOn(t.Context(), s.scanners, func(c *conn) error {
			var n int64
			return c.queryRowOnce("SELECT count(*) FROM sqlite_schema", &n)
		}); err != nil {
			t.Fatalf("a read transaction after a cancelled one: %v", err)
		}
	}
}

// VisitRows visits the rows ScanRows returns, in order, whether the
// dense walk completes, gives up for the join part-way (sparse) or is
// not used (scopes read, several values); visit returning false stops it.
func TestVisitRowsMatchesScanRows(t *testing.T) {
	t.Parallel()
	s := openPath(t, filepath.Join(t.TempDir(), "sync.db"))
	const n = 400
	project := func(i int) string {
		switch {
		case i < 150:
			return "a" // dense
		case i%10 == 0:
			return "a" // then sparse: the walk gives up for the join
		case i%2 == 0:
			return "b"
		default:
			return "c"
		}
	}
	seedScan(t, s, n, project)
	type seen struct {
		id      string
		version int64
		payload string
		cols    string
		nilCols bool
	}
	copyRow := func(r *store.Row) seen {
		return seen{strings.Clone(r.RowID), r.ServerVersion, string(r.Payload), string(r.ColumnVersions), r.ColumnVersions == nil}
	}
	for _, c := range []struct {
		name     string
		values   []string
		noScopes bool
	}{
		{"one value", []string{"a"}, true},
		{"one value, scopes read", []string{"a"}, false},
		{"two values", []string{"a", "b"}, true},
		{"other value", []string{"c"}, true},
	} {
		for _, limit := range []int{7, 50, 151, 1000} {
			for _, after := range []string{"", "r100", "r149", "r390"} {
				q := store.RowScanQuery{Table: storetest.TableTasks, Scopes: wire.ScopeMap{{Key: storetest.VarProject, Values: c.values}}, Limit: limit, NoScopes: c.noScopes}
				if after != "" {
					q.After = &after
				}
				want, err := s.ScanRows(t.Context(), "p", q)
				if err != nil {
					t.Fatal(err)
				}
				var got []seen
				if err := s.VisitRows(t.Context(), "p", q, func(r *store.Row) bool {
					got = append(got, copyRow(r))
					return true
				}); err != nil {
					t.Fatal(err)
				}
				if len(got) != len(want) {
					t.Fatalf("%s, limit %d after %q: visited %d rows, ScanRows %d", c.name, limit, after, len(got), len(want))
				}
				for i := range want {
					if w := copyRow(&want[i]); got[i] != w {
						t.Fatalf("%s, limit %d after %q: row %d visited %+v, ScanRows %+v", c.name, limit, after, i, got[i], w)
					}
				}
				// Stopped after k rows: exactly k visited, the first k.
				if k := len(want) / 2; k > 0 {
					var ids []string
					if err := s.VisitRows(t.Context(), "p", q, func(r *store.Row) bool {
						ids = append(ids, strings.Clone(r.RowID))
						return len(ids) < k
					}); err != nil {
						t.Fatal(err)
					}
					if len(ids) != k || ids[k-1] != want[k-1].RowID {
						t.Fatalf("%s, limit %d: stopped after %d rows, want %d ending at %s", c.name, limit, len(ids), k, want[k-1].RowID)
					}
				}
			}
		}
	}
}
