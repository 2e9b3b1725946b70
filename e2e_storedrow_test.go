package syncgo_test

import (
	"context"
	"errors"
	"net/http"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"zombiezen.com/go/sqlite"
	"zombiezen.com/go/sqlite/sqlitex"

	"github.com/syncgo/syncgo"
	"github.com/syncgo/syncgo/internal/sspclient"
	"github.com/syncgo/syncgo/sqlitestore"
	"github.com/syncgo/syncgo/store"
	"github.com/syncgo/syncgo/validate"
	"github.com/syncgo/syncgo/wire"
)

// A stored row that no longer decodes (a damaged database) is the
// server's failure, not the request's (§10.2): a push that touches it is
// answered HTTP 500 sync.internal_error without the decode error's text,
// and the host's error hook gets the original. It used to be HTTP 400
// sync.invalid_request, with the row's id and the codec's reason in the
// message, so a client dropped a valid request and nobody heard of the
// damage.
func TestE2EDamagedStoredRowIsInternal(t *testing.T) {
	path := filepath.Join(t.TempDir(), "sync.db")
	drv := sqliteFileDriver(path)
	var mu sync.Mutex
	var hooked []error
	e := newE2EEnv(t, drv, func(c *syncgo.Config) {
		c.OnError = func(err error, _ string) { mu.Lock(); hooked = append(hooked, err); mu.Unlock() }
	})
	e.allow("alice", map[string][]string{"project_id": {"p1"}})
	c := e.client("alice", sspclient.Options{ClientID: "writer"})
	mustUpsert(t, c, taskRow("a0", "p1", "x"))
	syncQuiet(t, c)
	epoch, ok := c.LogEpoch()
	if !ok {
		t.Fatal("the client holds no log epoch")
	}

	damageStoredRow(t, path, "a0")

	for _, op := range []wire.Operation{
		{Table: "tasks", RowID: "a0", Op: wire.OpDelete},
		e.upsertOp(t, map[string]any{"id": "a0", "title": "y"}),
	} {
		req := &wire.Request{Version: 3, Header: &wire.ReqHeader{ClientID: "writer", SchemaVersion: 1, LogEpoch: &epoch},
			Commits: []*wire.PushCommit{{ClientCommitID: "c-" + op.Op.String(), Operations: []wire.Operation{op}}}}
		r := e.post(t, body(encodeRequest(t, req)), nil)
		if r.status != http.StatusInternalServerError || !strings.Contains(string(r.body), `"sync.internal_error"`) {
			t.Errorf("%v of a damaged row: HTTP %d %s; want 500 sync.internal_error", op.Op, r.status, r.body)
		}
		if strings.Contains(string(r.body), "a0") || strings.Contains(string(r.body), "decode") {
			t.Errorf("%v of a damaged row: the answer tells the failure's text: %s", op.Op, r.body)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if len(hooked) != 2 {
		t.Fatalf("OnError called %d times; want twice", len(hooked))
	}
	for _, err := range hooked {
		if !strings.Contains(err.Error(), "stored row tasks/a0 does not decode") {
			t.Errorf("OnError got %v; want the stored row's decode failure", err)
		}
	}
}

// A storage failure under a validator's read fails the request whatever
// the validator returns (docs/validators.md: "A storage failure under a
// validator's read …: the request fails (sync.internal_error) and nothing
// is recorded"): a validator that drops the read's error and accepts
// judged a state it could not read. Here the row it reads is damaged.
func TestE2EValidatorIgnoringAReadFailureFailsTheRequest(t *testing.T) {
	for _, which := range []string{"row", "commit"} {
		t.Run(which, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "sync.db")
			drv := sqliteFileDriver(path)
			var armed atomic.Bool
			read := func(ctx context.Context, rd validate.Reader) {
				if armed.Load() {
					_, _, _ = rd.Row(ctx, "tasks", "a0") // the error is dropped
				}
			}
			e := newE2EEnv(t, drv, func(c *syncgo.Config) {
				if which == "row" {
					c.Validators = map[string]validate.Validator{"tasks": func(ctx context.Context, w *validate.Write) error {
						read(ctx, w.Tx)
						return nil
					}}
				} else {
					c.CommitValidator = func(ctx context.Context, cm *validate.Commit) error {
						read(ctx, cm.Tx)
						return nil
					}
				}
			})
			c := e.client("alice", sspclient.Options{ClientID: "writer"})
			mustUpsert(t, c, taskRow("a0", "p1", "x"))
			syncQuiet(t, c)
			epoch, ok := c.LogEpoch()
			if !ok {
				t.Fatal("the client holds no log epoch")
			}
			damageStoredRow(t, path, "a0")
			armed.Store(true)
			req := &wire.Request{Version: 3, Header: &wire.ReqHeader{ClientID: "writer", SchemaVersion: 1, LogEpoch: &epoch},
				Commits: []*wire.PushCommit{{ClientCommitID: "c-b1", Operations: []wire.Operation{e.upsertOp(t, taskRow("b1", "p1", "y"))}}}}
			r := e.post(t, body(encodeRequest(t, req)), nil)
			if r.status != http.StatusInternalServerError || !strings.Contains(string(r.body), `"sync.internal_error"`) {
				t.Errorf("push under a %s validator whose read failed: HTTP %d; want 500 sync.internal_error", which, r.status)
			}
			if _, err := e.store.PushResult(context.Background(), e2ePartition, "writer", "c-b1"); !errors.Is(err, store.ErrNotFound) {
				t.Errorf("a push result was recorded (%v); want nothing recorded", err)
			}
		})
	}
}

// damageStoredRow overwrites a tasks row's stored payload in the SQLite
// file at path with bytes no row codec decodes (a damaged database).
func damageStoredRow(t *testing.T, path, rowID string) {
	t.Helper()
	conn, err := sqlite.OpenConn(path)
	if err != nil {
		t.Fatal(err)
	}
	err = sqlitex.ExecuteTransient(conn, `UPDATE "tasks" SET _sync_payload = x'ff' WHERE _sync_row_id = ?`,
		&sqlitex.ExecOptions{Args: []any{rowID}})
	conn.Close()
	if err != nil {
		t.Fatal(err)
	}
}

// sqliteFileDriver is the SQLite driver on the file at path, so that a
// test can reach the file behind the server's back.
func sqliteFileDriver(path string) e2eDriver {
	return e2eDriver{name: "sqlite", open: func(t *testing.T) store.Store {
		s, err := sqlitestore.Open(context.Background(), sqlitestore.Config{Path: path})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = s.Close() })
		return s
	}}
}
