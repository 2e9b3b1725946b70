package syncgo_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/syncgo/syncgo"
	"github.com/syncgo/syncgo/internal/sspclient"
	"github.com/syncgo/syncgo/schema"
	"github.com/syncgo/syncgo/store"
	"github.com/syncgo/syncgo/syncerr"
	"github.com/syncgo/syncgo/validate"
	"github.com/syncgo/syncgo/wire"
)

// openTaskCap is the rule of the invariant tests: a project holds at most
// max open (done = false) tasks. It counts with an authoritative query
// inside the push transaction, so it sees every operation staged before
// its own, and the partition's write boundary keeps two commits from both
// passing against states that exclude one another.
func openTaskCap(max int64, calls *atomic.Int64) validate.Validator {
	return func(ctx context.Context, w *validate.Write) error {
		if calls != nil {
			calls.Add(1)
		}
		if w.Op != validate.Upsert || w.Row["done"] != false {
			return nil // deletes and closed tasks free room
		}
		if w.Stored != nil && w.Stored["done"] == false {
			return nil // already open: counted
		}
		n, err := w.Tx.Count(ctx, store.Query{Table: "tasks", Limit: int(max),
			Where: []store.Filter{store.Eq("project_id", w.Row["project_id"]), store.Eq("done", false)}})
		if err != nil {
			return err
		}
		if n >= max {
			return validate.Reject("app.project_full", fmt.Sprintf("a project holds at most %d open tasks", max),
				&validate.Details{FieldPaths: []string{"done"}, Reason: "open_task_limit", RequiredAction: "close_a_task"})
		}
		return nil
	}
}

// openTasks counts the server's open tasks per project.
func openTasks(t *testing.T, e *e2eEnv) map[string]int64 {
	t.Helper()
	tbl, _ := e.schema.Table("tasks")
	rows, err := e.store.ListRows(context.Background(), e2ePartition, "tasks", nil, 1000)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]int64{}
	for _, r := range rows {
		vals, err := tbl.RowCodec().DecodeRow(r.Payload)
		if err != nil {
			t.Fatal(err)
		}
		if !vals[3].Bool { // tasks: id, project_id, title, done, rank, notes
			out[vals[1].Str]++
		}
	}
	return out
}

// Many clients open and close tasks in two projects concurrently, over
// real HTTP, under a validator that caps the open tasks of a project: at
// the end no project holds more than the cap, every rejection carries the
// host code and its details, and a rejected commit of two tasks left
// neither behind.
func TestE2EValidatorInvariantUnderConcurrency(t *testing.T) {
	forEachDriver(t, func(t *testing.T, d e2eDriver) {
		const max, clients, commits = 5, 16, 12
		e := newE2EEnv(t, d, func(c *syncgo.Config) {
			c.Validators = map[string]validate.Validator{"tasks": openTaskCap(max, nil)}
		})
		cs := make([]*sspclient.Client, clients)
		for i := range cs {
			cs[i] = e.client(fmt.Sprintf("actor-%d", i), sspclient.Options{})
			syncQuiet(t, cs[i]) // accept the log epoch
		}
		var (
			mu       sync.Mutex
			rejected int
			applied  = map[string]bool{} // task ids of applied commits
			refused  = map[string]bool{} // task ids of rejected commits
		)
		var wg sync.WaitGroup
		for i, c := range cs {
			wg.Go(func() {
				rng := rand.New(rand.NewPCG(uint64(i), 7))
				var mine []map[string]any // this client's applied open tasks
				for k := range commits {
					project := fmt.Sprintf("p%d", rng.IntN(2))
					var ids []string
					var id string
					var err error
					switch {
					case len(mine) > 0 && rng.IntN(2) == 0: // close one of mine
						row := mine[0]
						mine = mine[1:]
						row["done"] = true
						id, err = c.Upsert("tasks", row)
					default: // open one or two tasks in one commit
						n := 1 + rng.IntN(2)
						id, err = c.Mutate(func(tx *sspclient.Tx) error {
							for j := range n {
								tid := fmt.Sprintf("t-%d-%d-%d", i, k, j)
								ids = append(ids, tid)
								if err := tx.Upsert("tasks", taskRow(tid, project, "x")); err != nil {
									return err
								}
							}
							return nil
						})
					}
					if err != nil {
						t.Error(err)
						return
					}
					res, err := c.Push(context.Background())
					if err != nil {
						t.Errorf("push: %v", err)
						return
					}
					o := pushed(t, res, id)
					mu.Lock()
					switch o.Status {
					case wire.PushApplied:
						for _, tid := range ids {
							applied[tid] = true
							mine = append(mine, taskRow(tid, project, "x"))
						}
					case wire.PushRejected:
						rejected++
						for _, tid := range ids {
							refused[tid] = true
						}
						r := o.Results[0]
						if r.Code != "app.project_full" || r.Retryable || len(o.Details) != 1 ||
							o.Details[0].DetailsJSON != `{"fieldPaths":["done"],"reason":"open_task_limit","requiredAction":"close_a_task"}` {
							t.Errorf("rejection %+v details %+v", r, o.Details)
						}
					default:
						t.Errorf("commit %s: %s", id, statusOf(o))
					}
					mu.Unlock()
				}
			})
		}
		wg.Wait()
		for p, n := range openTasks(t, e) {
			if n > max {
				t.Errorf("project %s holds %d open tasks, over the cap of %d", p, n, max)
			}
		}
		if rejected == 0 {
			t.Fatalf("no commit was rejected: the test did not reach the cap")
		}
		rows := e.serverRows("tasks")
		for id := range refused {
			if _, ok := rows[id]; ok {
				t.Errorf("task %s of a rejected commit is stored", id)
			}
		}
		for id := range applied {
			if _, ok := rows[id]; !ok {
				t.Errorf("task %s of an applied commit is missing", id)
			}
		}
		t.Logf("%d commits rejected by the cap, %d tasks applied", rejected, len(applied))
	})
}

// A rejection reaches the client with its host code, message and details;
// the whole commit rolls back; a replay of the same commit answers the
// recorded result (details included) without running the validator again;
// an error that is not a deliberate rejection answers
// sync.constraint_violation with the static message; and a whole-commit
// validator sees every operation and rejects at the one it names.
func TestE2EValidatorRejectionReplayAndCommitValidator(t *testing.T) {
	forEachDriver(t, func(t *testing.T, d e2eDriver) {
		var rowCalls, commitCalls atomic.Int64
		var lastCommit atomic.Pointer[validate.Commit]
		e := newE2EEnv(t, d, func(c *syncgo.Config) {
			c.Validators = map[string]validate.Validator{"tasks": func(ctx context.Context, w *validate.Write) error {
				rowCalls.Add(1)
				switch w.Row["title"] {
				case "too long title":
					return validate.Reject("app.title_too_long", "title over 10 characters",
						&validate.Details{FieldPaths: []string{"title"}, Reason: "max_length_exceeded"})
				case "boom":
					return errors.New("secret internal failure")
				case "panic":
					panic("secret panic")
				}
				return nil
			}}
			c.CommitValidator = func(ctx context.Context, cm *validate.Commit) error {
				commitCalls.Add(1)
				lastCommit.Store(cm)
				for _, op := range cm.Operations {
					if op.Row["title"] == "needs audit" {
						for _, o := range cm.Operations {
							if o.RowID == op.RowID+"-audit" {
								return nil
							}
						}
						return validate.Reject("app.audit_required", "completion needs an audit row",
							&validate.Details{Reason: "missing_sibling_operation"}).AtOp(op.OpIndex)
					}
				}
				// The final candidate state is readable.
				n, err := cm.Tx.Count(ctx, store.Query{Table: "tasks"})
				if err != nil {
					return err
				}
				if n > 100 {
					return validate.Reject("app.too_many", "too many tasks", nil)
				}
				return nil
			}
		})
		c := e.client("alice", sspclient.Options{})
		syncQuiet(t, c)
		epoch := e.partitionState().LogEpoch
		reqBody := encodeRequest(t, &wire.Request{Version: 3,
			Header: &wire.ReqHeader{ClientID: "dev-1", SchemaVersion: 1, LogEpoch: &epoch},
			Commits: []*wire.PushCommit{{ClientCommitID: "c1", Operations: []wire.Operation{
				e.upsertOp(t, taskRow("ok", "p1", "fine")),
				e.upsertOp(t, taskRow("bad", "p1", "too long title")),
			}}}})
		first := e.post(t, body(reqBody), nil)
		callsAfterFirst := rowCalls.Load()
		second := e.post(t, body(reqBody), nil)
		if first.status != 200 || second.status != 200 {
			t.Fatalf("HTTP %d, %d", first.status, second.status)
		}
		for n, r := range []rawResponse{first, second} {
			m, err := wire.DecodeMessage(r.body, wire.DecoderOptions{Kind: wire.KindResponse})
			if err != nil || len(m.Frames) < 3 {
				t.Fatalf("response %d: %v, %d frames", n, err, len(m.Frames))
			}
			pr, _ := m.Frames[1].(*wire.PushResult)
			det, _ := m.Frames[2].(*wire.PushResultDetails)
			if pr == nil || pr.Status != wire.PushRejected || len(pr.Results) != 1 {
				t.Fatalf("response %d: PUSH_RESULT %+v", n, pr)
			}
			got := pr.Results[0]
			if got.OpIndex != 1 || got.Code != "app.title_too_long" || got.Message != "title over 10 characters" || got.Retryable {
				t.Errorf("response %d: result %+v", n, got)
			}
			if det == nil || len(det.Entries) != 1 || det.Entries[0].OpIndex != 1 ||
				det.Entries[0].DetailsJSON != `{"fieldPaths":["title"],"reason":"max_length_exceeded"}` {
				t.Errorf("response %d: details %+v", n, det)
			}
		}
		if !bytes.Equal(first.body[bytes.Index(first.body, []byte("c1")):], second.body[bytes.Index(second.body, []byte("c1")):]) {
			t.Errorf("the replay's push result differs from the first")
		}
		if rowCalls.Load() != callsAfterFirst {
			t.Errorf("the replay ran the validator again (%d calls, then %d)", callsAfterFirst, rowCalls.Load())
		}
		if commitCalls.Load() != 0 {
			t.Errorf("the whole-commit validator ran for a commit a row validator rejected")
		}
		if rows := e.serverRows("tasks"); len(rows) != 0 {
			t.Fatalf("a rejected commit left rows: %v", rows)
		}

		// Unexpected failures: a generic code and message, nothing leaked.
		for _, title := range []string{"boom", "panic"} {
			id := mustUpsert(t, c, taskRow(title, "p1", title))
			res, err := c.Push(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			r := pushed(t, res, id).Results[0]
			if r.Code != syncerr.CodeConstraintViolation || r.Message != "write validator failed" {
				t.Errorf("%s: result %+v", title, r)
			}
		}

		// The whole-commit validator: the audit rule sees its sibling, or
		// rejects at the operation it names.
		id := mustUpsert(t, c, taskRow("t1", "p1", "plain"))
		lone, err := c.Mutate(func(tx *sspclient.Tx) error {
			if err := tx.Upsert("tasks", taskRow("t2", "p1", "plain")); err != nil {
				return err
			}
			return tx.Upsert("tasks", taskRow("t3", "p1", "needs audit"))
		})
		if err != nil {
			t.Fatal(err)
		}
		paired, err := c.Mutate(func(tx *sspclient.Tx) error {
			if err := tx.Upsert("tasks", taskRow("t4", "p1", "needs audit")); err != nil {
				return err
			}
			if err := tx.Delete("tasks", "never-existed"); err != nil {
				return err
			}
			return tx.Upsert("tasks", taskRow("t4-audit", "p1", "plain"))
		})
		if err != nil {
			t.Fatal(err)
		}
		res, err := c.Push(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		if o := pushed(t, res, id); o.Status != wire.PushApplied {
			t.Errorf("plain commit: %s", statusOf(o))
		}
		o := pushed(t, res, lone)
		if o.Status != wire.PushRejected || o.Results[0].Code != "app.audit_required" || o.Results[0].OpIndex != 1 ||
			len(o.Details) != 1 || o.Details[0].OpIndex != 1 {
			t.Errorf("lone audit commit: %s %+v %+v", statusOf(o), o.Results, o.Details)
		}
		if o := pushed(t, res, paired); o.Status != wire.PushApplied {
			t.Errorf("paired audit commit: %s", statusOf(o))
		}
		cm := lastCommit.Load()
		if cm == nil || len(cm.Operations) != 3 || cm.ClientCommitID != paired || cm.ActorID != "alice" ||
			cm.Operations[1].Op != validate.Delete || cm.Operations[1].Stored != nil || cm.Operations[2].NextServerVersion != 1 {
			t.Errorf("commit evidence %+v", cm)
		}
		want := []string{"t1", "t4", "t4-audit"}
		rows := e.serverRows("tasks")
		if len(rows) != len(want) {
			t.Errorf("rows %v, want %v", rows, want)
		}
		for _, id := range want {
			if _, ok := rows[id]; !ok {
				t.Errorf("row %s missing", id)
			}
		}
	})
}

// A schema bump landing while a validator runs, between its authoritative
// query and the commit: the bump's first durable step raises the
// partition's writer fence (a checkpoint declared for the next version, by
// another process on the same database). On Postgres the declaration takes
// no lock and lands at once: the append is refused by the fence inside the
// push transaction, the push answers sync.schema_not_ready, and nothing of
// it is written (no row, no commit, no recorded result). On SQLite nothing
// can land inside a write transaction: the other process waits for the
// database lock, the commit lands first, and the very next push is refused
// by the fence. Either way no commit of the older version follows the
// fence.
func TestE2EValidatorSchemaBumpBetweenQueryAndCommit(t *testing.T) {
	forEachBarrierDriver(t, func(t *testing.T, e *barrierEnv) {
		v1, _ := windowSchemas(t)
		other := e.open().(store.Barrier) // another process on the same database
		declared := make(chan error, 1)
		var queried atomic.Bool
		st := e.open()
		srv, err := syncgo.New(syncgo.Config{
			Store: st, Schema: v1, RetentionInterval: -1,
			Authenticate: func(*http.Request) (syncgo.Auth, error) { return syncgo.Auth{ActorID: "alice", Partition: "p"}, nil },
			ResolveScopes: func(context.Context, syncgo.ScopeRequest) (map[string][]string, error) {
				return map[string][]string{"project_id": {"*"}}, nil
			},
			Validators: map[string]validate.Validator{"tasks": func(ctx context.Context, w *validate.Write) error {
				if _, err := w.Tx.Count(ctx, store.Query{Table: "tasks", Where: []store.Filter{store.Eq("project_id", "p1")}}); err != nil {
					return err
				}
				if w.Row["title"] != "bump-now" || !queried.CompareAndSwap(false, true) {
					return nil
				}
				bump := func() error {
					_, err := other.DeclareCheckpoint(context.Background(),
						store.CheckpointDeclaration{Partition: "p", Name: "proj", SchemaVersion: 2}, 1)
					return err
				}
				if e.driver.name == "postgres" {
					declared <- bump() // lands now, inside this push's transaction
				} else {
					go func() { declared <- bump() }() // waits for this write's lock
				}
				return nil
			}},
		})
		if err != nil {
			t.Fatal(err)
		}
		if err := srv.Start(context.Background()); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { srv.Stop(context.Background()) })
		hs := httptest.NewServer(srv.Handler())
		t.Cleanup(hs.Close)

		_, b := post(t, hs.URL, pullReq(nil, 1))
		m, _ := wire.DecodeMessage(b, wire.DecoderOptions{})
		epoch := m.Frames[0].(*wire.RespHeader).LogEpoch
		push := func(id, title string) (int, []byte) {
			return post(t, hs.URL, &wire.Request{Version: 3, Header: &wire.ReqHeader{ClientID: "c", SchemaVersion: 1, LogEpoch: &epoch},
				Commits: []*wire.PushCommit{{ClientCommitID: id, Operations: []wire.Operation{{Table: "tasks", RowID: id, Op: wire.OpUpsert,
					Payload: sparse(t, v1, wire.Value{Str: id}, wire.Value{Str: "p1"}, wire.Value{Str: title})}}}}})
		}
		if status, _ := push("a", "before"); status != 200 {
			t.Fatalf("push before the bump: HTTP %d", status)
		}
		status, b := push("b", "bump-now")
		if err := <-declared; err != nil {
			t.Fatalf("declare checkpoint: %v", err)
		}
		p, err := st.Partition(context.Background(), "p")
		if err != nil {
			t.Fatal(err)
		}
		_, rowErr := st.Row(context.Background(), "p", "tasks", "b")
		_, recErr := st.PushResult(context.Background(), "p", "c", "b")
		if e.driver.name == "postgres" {
			wantNotReady(t, status, b, "writerFence")
			if !errors.Is(rowErr, store.ErrNotFound) || !errors.Is(recErr, store.ErrNotFound) || p.MaxCommitSeq != 1 {
				t.Fatalf("the refused push wrote: row %v, result %v, MaxCommitSeq %d", rowErr, recErr, p.MaxCommitSeq)
			}
		} else {
			if status != 200 || rowErr != nil || recErr != nil || p.MaxCommitSeq != 2 {
				t.Fatalf("the push ahead of the bump: HTTP %d, row %v, result %v, MaxCommitSeq %d", status, rowErr, recErr, p.MaxCommitSeq)
			}
		}
		status, b = push("c", "after")
		wantNotReady(t, status, b, "writerFence")
		if _, err := st.Row(context.Background(), "p", "tasks", "c"); !errors.Is(err, store.ErrNotFound) {
			t.Fatalf("a push after the bump wrote its row: %v", err)
		}
	})
}

// The operations declared references append run the row validators too
// (§6.11): a cascade's deletes and a SET NULL's upserts, marked appended
// and attributed to the client delete they came from; a rejection of one
// rolls the whole commit back, the client's delete included. The
// whole-commit validator sees them after the client's operations.
func TestE2EValidatorsRunForReferenceOperations(t *testing.T) {
	forEachDriver(t, func(t *testing.T, d e2eDriver) {
		sc, err := schema.New(1).
			Table("lists", "id", schema.String("id"), schema.String("project_id")).Scope("project:{project_id}").
			Table("items", "id", schema.String("id"), schema.String("project_id"), schema.String("list_id"), schema.String("title")).
			Scope("project:{project_id}").Reference("list_id", "lists", "CASCADE").Index("items_list", "list_id").
			Table("notes", "id", schema.String("id"), schema.String("project_id"), schema.String("list_id").Null()).
			Scope("project:{project_id}").Reference("list_id", "lists", "SET NULL").Index("notes_list", "list_id").
			Compile()
		if err != nil {
			t.Fatal(err)
		}
		var mu sync.Mutex
		var seen []validate.Operation
		var evidence []validate.Operation
		record := func(_ context.Context, w *validate.Write) error {
			mu.Lock()
			defer mu.Unlock()
			seen = append(seen, w.Operation)
			if w.Table == "items" && w.Op == validate.Delete && w.Stored["title"] == "pinned" {
				return validate.Reject("app.pinned", "a pinned item stays", &validate.Details{Reason: "pinned"})
			}
			return nil
		}
		e := newE2EEnv(t, d, func(c *syncgo.Config) {
			c.Schema = sc
			c.Validators = map[string]validate.Validator{"items": record, "notes": record}
			c.CommitValidator = func(_ context.Context, cm *validate.Commit) error {
				mu.Lock()
				defer mu.Unlock()
				evidence = append([]validate.Operation(nil), cm.Operations...)
				return nil
			}
		})
		e.schema = sc
		c := e.client("alice", sspclient.Options{})
		syncQuiet(t, c)
		seed := func(rows ...[2]any) string {
			t.Helper()
			id, err := c.Mutate(func(tx *sspclient.Tx) error {
				for _, r := range rows {
					if err := tx.Upsert(r[0].(string), r[1]); err != nil {
						return err
					}
				}
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
			return id
		}
		seed([2]any{"lists", map[string]any{"id": "L1", "project_id": "p1"}},
			[2]any{"lists", map[string]any{"id": "L2", "project_id": "p1"}},
			[2]any{"items", map[string]any{"id": "i1", "project_id": "p1", "list_id": "L1", "title": "plain"}},
			[2]any{"items", map[string]any{"id": "i2", "project_id": "p1", "list_id": "L2", "title": "pinned"}},
			[2]any{"notes", map[string]any{"id": "n1", "project_id": "p1", "list_id": "L1"}})
		if res, err := c.Push(context.Background()); err != nil || res.Pushed[0].Status != wire.PushApplied {
			t.Fatalf("seed: %v %+v", err, res)
		}

		mu.Lock()
		seen = nil
		mu.Unlock()
		del1, _ := c.Delete("lists", "L1")
		del2, _ := c.Mutate(func(tx *sspclient.Tx) error {
			if err := tx.Upsert("notes", map[string]any{"id": "n2", "project_id": "p1", "list_id": nil}); err != nil {
				return err
			}
			return tx.Delete("lists", "L2")
		})
		res, err := c.Push(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		if o := pushed(t, res, del1); o.Status != wire.PushApplied {
			t.Fatalf("delete of L1: %s", statusOf(o))
		}
		o := pushed(t, res, del2)
		if o.Status != wire.PushRejected || o.Results[0].Code != "app.pinned" || o.Results[0].OpIndex != 1 ||
			len(o.Details) != 1 || o.Details[0].OpIndex != 1 {
			t.Fatalf("delete of L2: %s %+v %+v", statusOf(o), o.Results, o.Details)
		}
		mu.Lock()
		defer mu.Unlock()
		// L1's commit: the cascade's delete of i1 and the SET NULL of n1,
		// both appended and attributed to operation 0.
		var cascade, setNull *validate.Operation
		for i := range seen {
			switch s := &seen[i]; {
			case s.Table == "items" && s.RowID == "i1":
				cascade = s
			case s.Table == "notes" && s.RowID == "n1":
				setNull = s
			}
		}
		if cascade == nil || cascade.Op != validate.Delete || !cascade.Appended || cascade.OpIndex != 0 || cascade.Row != nil ||
			cascade.Stored["list_id"] != "L1" {
			t.Errorf("cascade delete seen as %+v", cascade)
		}
		if setNull == nil || setNull.Op != validate.Upsert || !setNull.Appended || setNull.OpIndex != 0 ||
			setNull.Row["list_id"] != nil || setNull.Stored["list_id"] != "L1" || setNull.NextServerVersion != 2 {
			t.Errorf("SET NULL seen as %+v", setNull)
		}
		if len(evidence) != 3 || evidence[0].Table != "lists" || evidence[0].Appended || !evidence[1].Appended || !evidence[2].Appended {
			t.Errorf("whole-commit evidence of L1's delete: %+v", evidence)
		}
		// The rejected commit left L2, i2 and no n2.
		if _, ok := e.serverRows("lists")["L2"]; !ok {
			t.Errorf("L2 was deleted by a rejected commit")
		}
		if _, ok := e.serverRows("items")["i2"]; !ok {
			t.Errorf("i2 was deleted by a rejected commit")
		}
		if _, ok := e.serverRows("notes")["n2"]; ok {
			t.Errorf("n2 was written by a rejected commit")
		}
		if _, ok := e.serverRows("items")["i1"]; ok {
			t.Errorf("i1 survived its list's cascade")
		}
	})
}
