package syncgo_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/syncgo/syncgo"
	"github.com/syncgo/syncgo/internal/remotewire"
	"github.com/syncgo/syncgo/internal/sqliteimage"
	"github.com/syncgo/syncgo/internal/sspclient"
	"github.com/syncgo/syncgo/schema"
	"github.com/syncgo/syncgo/store"
	"github.com/syncgo/syncgo/syncerr"
	"github.com/syncgo/syncgo/wire"
)

// noteOp is a raw upsert of notes presenting exactly values' columns.
func (e *e2eEnv) noteOp(t *testing.T, values map[string]any) wire.Operation {
	t.Helper()
	tbl, _ := e.schema.Table("notes")
	row := wire.SparseRow{Present: make([]bool, len(tbl.Columns())), Values: make([]wire.Value, len(tbl.Columns()))}
	for name, v := range values {
		i, _ := tbl.ColumnIndex(name)
		wv, err := sspclient.WireValue(tbl.Columns()[i].Type, v)
		if err != nil {
			t.Fatal(err)
		}
		row.Present[i], row.Values[i] = true, wv
	}
	payload, err := tbl.RowCodec().AppendSparse(nil, row)
	if err != nil {
		t.Fatal(err)
	}
	return wire.Operation{Table: "notes", RowID: values["id"].(string), Op: wire.OpUpsert, Payload: payload}
}

// appendMerger is a deliberately non-idempotent host merger: the merge
// appends the pushed bytes to the stored ones, so a value merged twice
// shows twice. "boom" panics, "fail" errors.
var appendMerger = syncgo.CRDTMergerFunc(func(stored, incoming []byte) ([]byte, error) {
	switch string(incoming) {
	case "boom":
		panic("boom")
	case "fail":
		return nil, errors.New("refused")
	}
	return append(append([]byte{}, stored...), incoming...), nil
})

// One request of grouped commits that merge crdt columns (§5.10.3, §6.4):
// each commit sees the value the one before it merged; a commit whose
// merge fails or panics is rejected with sync.crdt_merge_failed and
// writes nothing (not its title edit either) while the commits around it
// apply; a repeated clientCommitId answers cached without merging again.
// The whole request replayed answers every commit from the journal:
// nothing merges twice (the merger here is not idempotent, so a second
// merge would show), the row keeps its version and the log its length.
func TestE2ECRDTGroupedCommitsAndReplayMergeOnce(t *testing.T) {
	forEachDriver(t, func(t *testing.T, d e2eDriver) {
		e := newNotesEnv(t, d, "append", func(c *syncgo.Config) {
			c.CRDTMergers = map[string]syncgo.CRDTMerger{"append": appendMerger}
		})
		syncQuiet(t, e.client("alice", sspclient.Options{}))
		epoch := e.partitionState().LogEpoch
		base := e.partitionState().MaxCommitSeq
		one := func(id string, ops ...wire.Operation) *wire.PushCommit {
			return &wire.PushCommit{ClientCommitID: id, Operations: ops}
		}
		commits := []*wire.PushCommit{
			one("c1", e.noteOp(t, noteRow("n1", "t0", []byte("A")))),
			one("c2", e.noteOp(t, map[string]any{"id": "n1", "doc": []byte("B")})),
			one("c3", e.noteOp(t, map[string]any{"id": "n1", "title": "lost"}), e.noteOp(t, map[string]any{"id": "n1", "doc": []byte("boom")})),
			one("c4", e.noteOp(t, map[string]any{"id": "n1", "doc": []byte("C")})),
			one("c5", e.noteOp(t, map[string]any{"id": "n1", "title": "lost too", "doc": []byte("fail")})),
			one("c2", e.noteOp(t, map[string]any{"id": "n1", "doc": []byte("X")})),
			one("c6", e.noteOp(t, noteRow("n2", "t", []byte("boom")))),
			one("c7", e.noteOp(t, map[string]any{"id": "n1", "title": "t1", "doc": []byte("D")})),
		}
		type want struct {
			status wire.PushStatus
			seq    int64
		}
		wants := []want{{wire.PushApplied, base + 1}, {wire.PushApplied, base + 2}, {wire.PushRejected, 0},
			{wire.PushApplied, base + 3}, {wire.PushRejected, 0}, {wire.PushCached, base + 2}, {wire.PushRejected, 0},
			{wire.PushApplied, base + 4}}
		req := &wire.Request{Version: wire.Version3, Header: &wire.ReqHeader{ClientID: "crdt-outbox", SchemaVersion: 1, LogEpoch: &epoch},
			Commits: commits}
		check := func(round string) {
			t.Helper()
			got := pushResults(decodeResponse(t, e.post(t, body(encodeRequest(t, req)), nil)))
			if len(got) != len(wants) {
				t.Fatalf("%s: %d PUSH_RESULTs, want %d", round, len(got), len(wants))
			}
			for i, w := range wants {
				if got[i].Status != w.status || got[i].CommitSeq != w.seq {
					t.Fatalf("%s: result %d (%s) is %s seq %d, want %s seq %d", round, i, commits[i].ClientCommitID,
						got[i].Status, got[i].CommitSeq, w.status, w.seq)
				}
				if w.status == wire.PushRejected {
					last := got[i].Results[len(got[i].Results)-1]
					if last.Code != syncerr.CodeCRDTMergeFailed {
						t.Fatalf("%s: %s rejected with %s, want %s", round, commits[i].ClientCommitID, last.Code, syncerr.CodeCRDTMergeFailed)
					}
				}
			}
			row, got1 := e.storedNote(t, "n1")
			if !bytes.Equal(got1["doc"].([]byte), []byte("ABCD")) || got1["title"] != "t1" || row.ServerVersion != 4 {
				t.Fatalf("%s: n1 = v%d title %v doc %q; want v4 t1 \"ABCD\" (every applied value merged once)",
					round, row.ServerVersion, got1["title"], got1["doc"])
			}
			if _, err := e.store.Row(context.Background(), e2ePartition, "notes", "n2"); !errors.Is(err, store.ErrNotFound) {
				t.Fatalf("%s: n2 after a panicking insert merge: %v, want not found", round, err)
			}
			if p := e.partitionState(); p.MaxCommitSeq != base+4 {
				t.Fatalf("%s: MaxCommitSeq %d, want %d", round, p.MaxCommitSeq, base+4)
			}
		}
		check("first delivery")
		for i := range wants {
			if wants[i].status == wire.PushApplied {
				wants[i].status = wire.PushCached
			}
		}
		check("replay")
	})
}

// The life of a merged document over HTTP on both drivers: an update
// that names its own client's later struct (Y.applyUpdate throws on it)
// is refused with sync.crdt_merge_failed and writes nothing; a deleted row
// re-created (baseVersion 0) merges its doc with the empty document, not
// with the deleted row's; and a client that subscribes afterwards gets
// the merged bytes in its bootstrap, as the clients that pulled the
// changes hold them.
func TestE2ECRDTPoisonDeleteRecreateBootstrap(t *testing.T) {
	forEachDriver(t, func(t *testing.T, d e2eDriver) {
		e := newNotesEnv(t, d, "yjs-doc")
		ups := yjsUpdates(t, 3, nonTrivial)
		a := e.client("alice", sspclient.Options{})
		subscribeNotes(t, a)
		mustNote(t, a, noteRow("n1", "t", ups[0]))
		syncQuiet(t, a)
		before := e.partitionState()

		// Client 1 inserts "a" after its own clock 5, at clock 0.
		ahead := []byte{1, 1, 1, 0, 0x84, 1, 5, 1, 'a', 0}
		poison := mustNote(t, a, map[string]any{"id": "n1", "doc": ahead})
		syncQuiet(t, a)
		wantMergeFailed(t, a, poison, "an update naming its own client's later struct")
		if row, got := e.storedNote(t, "n1"); row.ServerVersion != 1 || !bytes.Equal(got["doc"].([]byte), mustMergeAll(t, ups[0])) {
			t.Fatalf("n1 = v%d after the refused update; want v1 with the first doc", row.ServerVersion)
		}
		if after := e.partitionState(); after.MaxCommitSeq != before.MaxCommitSeq {
			t.Fatalf("the refused commit moved the log from %d to %d", before.MaxCommitSeq, after.MaxCommitSeq)
		}

		del, err := a.Delete("notes", "n1")
		if err != nil {
			t.Fatal(err)
		}
		syncQuiet(t, a)
		wantApplied(t, a, del, "delete")
		again := mustNote(t, a, noteRow("n1", "t2", ups[1]), sspclient.BaseVersion(0))
		syncQuiet(t, a)
		wantApplied(t, a, again, "re-create")
		if _, got := e.storedNote(t, "n1"); !bytes.Equal(got["doc"].([]byte), mustMergeAll(t, ups[1])) {
			t.Fatal("the re-created row's doc is not its own update merged with the empty document")
		}
		mustNote(t, a, map[string]any{"id": "n1", "doc": ups[2]})
		syncQuiet(t, a)

		late := e.client("bob", sspclient.Options{})
		subscribeNotes(t, late)
		syncQuiet(t, late)
		server := e.serverRows("notes")
		if _, got := e.storedNote(t, "n1"); !bytes.Equal(got["doc"].([]byte), mustMergeAll(t, ups[1], ups[2])) {
			t.Fatal("the stored doc is not the merge of the re-created row's updates")
		}
		sameRows(t, "late subscriber vs server", clientRows(t, late, "notes"), server)
		sameRows(t, "A vs server", clientRows(t, a, "notes"), server)
	})
}

// A schema version that appends a crdt column (§9 window): a client of
// the older version, which does not know the column, writes its other
// columns (a full row on wire version 2, a sparse one on 3) and leaves
// the merged doc as it is; its insert stores NULL; its conflict's
// serverRow is in its own layout. A current client's pushes keep merging.
func TestE2ECRDTColumnAddedBySchemaVersion(t *testing.T) {
	forEachDriver(t, func(t *testing.T, d e2eDriver) {
		v1, err := schema.New(1).
			Table("notes", "id", schema.String("id"), schema.String("project_id"), schema.String("title")).
			Scope("project:{project_id}").Compile()
		if err != nil {
			t.Fatal(err)
		}
		v2, err := schema.New(2).
			Table("notes", "id", schema.String("id"), schema.String("project_id"), schema.String("title"),
				schema.CRDT("doc", schema.CRDTYjsDoc).Null()).
			Scope("project:{project_id}").Compile()
		if err != nil {
			t.Fatal(err)
		}
		e := newE2EEnv(t, d, func(c *syncgo.Config) { c.Schema, c.SchemaWindow = v2, []*schema.Compiled{v1} })
		e.schema = v2
		ups := yjsUpdates(t, 2, nonTrivial)
		cur := e.client("alice", sspclient.Options{})
		subscribeNotes(t, cur)
		mustNote(t, cur, noteRow("n1", "t0", ups[0]))
		syncQuiet(t, cur)
		merged := mustMergeAll(t, ups[0])

		for _, wv := range []uint16{wire.Version2, wire.Version3} {
			old, err := sspclient.New(e.url, "alice", v1, sspclient.Options{WireVersion: wv})
			if err != nil {
				t.Fatal(err)
			}
			subscribeNotes(t, old)
			syncQuiet(t, old)
			title := fmt.Sprintf("old v%d", wv)
			id := mustNote(t, old, map[string]any{"id": "n1", "project_id": "p1", "title": title})
			syncQuiet(t, old)
			wantApplied(t, old, id, "older client's title edit")
			if _, got := e.storedNote(t, "n1"); got["title"] != title || !bytes.Equal(got["doc"].([]byte), merged) {
				t.Fatalf("v%d: n1 title %v and %d doc bytes; want %q and the merged doc untouched", wv, got["title"], len(got["doc"].([]byte)), title)
			}
			if r, ok := old.Row("notes", "n1"); !ok || len(r.Values) != 3 {
				t.Fatalf("v%d: the older client holds %+v, want n1 in its three-column layout", wv, r)
			}
			stale := mustNote(t, old, map[string]any{"id": "n1", "project_id": "p1", "title": "stale"}, sspclient.BaseVersion(1))
			res, err := old.Sync(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			cf, ok := pushed(t, res, stale).Conflict()
			if !ok {
				t.Fatalf("v%d: a stale title edit: %s, want a conflict", wv, statusOf(pushed(t, res, stale)))
			}
			tbl, _ := v1.Table("notes")
			vals, err := tbl.RowCodec().DecodeRow(cf.ServerRow)
			if err != nil || len(vals) != 3 || vals[2].Str != title {
				t.Fatalf("v%d: serverRow %v (err %v), want n1 in the older layout with title %q", wv, vals, err, title)
			}
		}
		old, err := sspclient.New(e.url, "alice", v1, sspclient.Options{})
		if err != nil {
			t.Fatal(err)
		}
		ins := mustNote(t, old, map[string]any{"id": "n2", "project_id": "p1", "title": "from old"})
		syncQuiet(t, old)
		wantApplied(t, old, ins, "older client's insert")
		if _, got := e.storedNote(t, "n2"); got["doc"] != nil {
			t.Fatalf("n2 doc = %v, want NULL", got["doc"])
		}
		mustNote(t, cur, map[string]any{"id": "n1", "doc": ups[1]})
		mustNote(t, cur, map[string]any{"id": "n2", "doc": ups[1]})
		syncQuiet(t, cur)
		if _, got := e.storedNote(t, "n1"); !bytes.Equal(got["doc"].([]byte), mustMergeAll(t, ups[0], ups[1])) {
			t.Fatal("n1's doc is not the merge of both updates")
		}
		if _, got := e.storedNote(t, "n2"); !bytes.Equal(got["doc"].([]byte), mustMergeAll(t, ups[1])) {
			t.Fatal("n2's doc is not its update merged with the empty document")
		}
		sameRows(t, "current client vs server", clientRows(t, cur, "notes"), e.serverRows("notes"))
	})
}

// Operations of one commit that write the crdt column of one row each
// merge with the value the operation before left, on both drivers (the
// Postgres driver reads rows ahead of the transaction): an insert and two
// patches of n1 in one commit store all three values, merged once each.
func TestE2ECRDTOneCommitMergesInOrder(t *testing.T) {
	forEachDriver(t, func(t *testing.T, d e2eDriver) {
		e := newNotesEnv(t, d, "append", func(c *syncgo.Config) {
			c.CRDTMergers = map[string]syncgo.CRDTMerger{"append": appendMerger}
		})
		a := e.client("alice", sspclient.Options{})
		subscribeNotes(t, a)
		mustNote(t, a, noteRow("n0", "t", []byte("0")))
		syncQuiet(t, a)
		id, err := a.Mutate(func(tx *sspclient.Tx) error {
			for _, v := range []map[string]any{noteRow("n1", "t", []byte("A")), {"id": "n1", "doc": []byte("B")},
				{"id": "n0", "doc": []byte("1")}, {"id": "n1", "title": "u", "doc": []byte("C")}, {"id": "n0", "doc": []byte("2")}} {
				if err := tx.Upsert("notes", v); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		syncQuiet(t, a)
		wantApplied(t, a, id, "the commit")
		for row, want := range map[string]string{"n0": "012", "n1": "ABC"} {
			if _, got := e.storedNote(t, row); string(got["doc"].([]byte)) != want {
				t.Fatalf("%s doc = %q, want %q", row, got["doc"], want)
			}
		}
		sameRows(t, "A vs server", clientRows(t, a, "notes"), e.serverRows("notes"))
	})
}

// unionMerger keeps the set of bytes of both values, sorted: commutative,
// associative and idempotent, so the stored value is the union of every
// applied push whatever their order, and a lost merge shows as a
// missing byte.
var unionMerger = syncgo.CRDTMergerFunc(func(stored, incoming []byte) ([]byte, error) {
	var seen [256]bool
	for _, b := range append(append([]byte{}, stored...), incoming...) {
		seen[b] = true
	}
	var out []byte
	for b, ok := range seen {
		if ok {
			out = append(out, byte(b))
		}
	}
	return out, nil
})

// Clients pushing crdt-only patches of one row at once (each its own
// HTTP requests, racing for the partition) lose no merge: the stored
// value holds every pushed byte, and the row's version counts every push.
func TestE2ECRDTConcurrentPushersLoseNothing(t *testing.T) {
	forEachDriver(t, func(t *testing.T, d e2eDriver) {
		e := newNotesEnv(t, d, "union", func(c *syncgo.Config) {
			c.CRDTMergers = map[string]syncgo.CRDTMerger{"union": unionMerger}
		})
		seed := e.client("alice", sspclient.Options{})
		mustNote(t, seed, noteRow("n1", "t", []byte{0}))
		syncQuiet(t, seed)
		const pushers, each = 6, 8
		errs := make(chan error, pushers)
		for p := 0; p < pushers; p++ {
			c := e.client("alice", sspclient.Options{})
			go func() {
				for i := 0; i < each; i++ {
					if _, err := c.Upsert("notes", map[string]any{"id": "n1", "doc": []byte{byte(1 + p*each + i)}}); err != nil {
						errs <- err
						return
					}
					if _, err := c.SyncUntilQuiet(context.Background(), 10); err != nil {
						errs <- err
						return
					}
				}
				errs <- nil
			}()
		}
		for p := 0; p < pushers; p++ {
			if err := <-errs; err != nil {
				t.Fatal(err)
			}
		}
		row, got := e.storedNote(t, "n1")
		if doc := got["doc"].([]byte); len(doc) != 1+pushers*each {
			t.Fatalf("stored %d distinct bytes, want %d: a concurrent merge was lost", len(doc), 1+pushers*each)
		}
		if row.ServerVersion != 1+pushers*each {
			t.Fatalf("n1 at version %d, want %d", row.ServerVersion, 1+pushers*each)
		}
	})
}

// A commit that conflicts on its title (every wire version: a stale base
// on a full row in 1 and 2, on the title column in 3) merges nothing; its
// serverRow carries the doc merged so far. Replayed after the doc has
// moved on, it answers the persisted rejection, serverRow included, and
// still merges nothing.
func TestE2ECRDTConflictReplayAnswersJournal(t *testing.T) {
	forEachDriver(t, func(t *testing.T, d e2eDriver) {
		for _, v := range []uint16{wire.Version1, wire.Version2, wire.Version3} {
			t.Run(fmt.Sprintf("v%d", v), func(t *testing.T) {
				e := newNotesEnv(t, d, schema.CRDTYjsDoc)
				ups := yjsUpdates(t, 3, nonTrivial)
				a := e.client("alice", sspclient.Options{})
				subscribeNotes(t, a)
				mustNote(t, a, noteRow("n1", "base", ups[0]))
				syncQuiet(t, a)
				mustNote(t, a, map[string]any{"id": "n1", "title": "A"}, sspclient.Versioned())
				syncQuiet(t, a)

				op := e.noteOp(t, noteRow("n1", "B", ups[2]))
				if v < wire.Version3 {
					tbl, _ := e.schema.Table("notes")
					sr, err := tbl.RowCodec().DecodeSparse(op.Payload)
					if err != nil {
						t.Fatal(err)
					}
					if op.Payload, err = tbl.RowCodec().AppendRow(nil, sr.Values); err != nil {
						t.Fatal(err)
					}
				}
				base := int64(1)
				op.BaseVersion = &base
				req := &wire.Request{Version: v, Header: &wire.ReqHeader{ClientID: "replayer", SchemaVersion: 1},
					Commits: []*wire.PushCommit{{ClientCommitID: "lose", Operations: []wire.Operation{op}}}}
				if v >= wire.Version2 {
					epoch := e.partitionState().LogEpoch
					req.Header.LogEpoch = &epoch
				}
				first := pushResults(decodeResponse(t, e.post(t, body(encodeRequest(t, req)), nil)))
				mergedThen := mustMergeAll(t, ups[0])
				if len(first) != 1 || first[0].Status != wire.PushRejected || first[0].Results[0].Code != syncerr.CodeVersionConflict {
					t.Fatalf("the stale commit: %+v, want a version conflict", first)
				}
				srow := decodeRow(t, a, "notes", first[0].Results[0].ServerRow)
				if srow["title"] != "A" || !bytes.Equal(srow["doc"].([]byte), mergedThen) {
					t.Fatalf("serverRow title %v, %d doc bytes; want A and the doc merged so far", srow["title"], len(srow["doc"].([]byte)))
				}

				mustNote(t, a, map[string]any{"id": "n1", "doc": ups[1]})
				syncQuiet(t, a)
				again := pushResults(decodeResponse(t, e.post(t, body(encodeRequest(t, req)), nil)))
				if len(again) != 1 || again[0].Status != wire.PushRejected || again[0].Results[0].Code != syncerr.CodeVersionConflict ||
					!bytes.Equal(again[0].Results[0].ServerRow, first[0].Results[0].ServerRow) {
					t.Fatalf("the replay: %+v, want the persisted conflict unchanged", again)
				}
				if row, got := e.storedNote(t, "n1"); row.ServerVersion != 3 || got["title"] != "A" ||
					!bytes.Equal(got["doc"].([]byte), mustMergeAll(t, ups[0], ups[1])) {
					t.Fatalf("n1 = v%d title %v; want v3 A with the doc of the two applied updates only", row.ServerVersion, got["title"])
				}
			})
		}
	})
}

// A remote command (REMOTE.md §3) that writes a crdt column goes through
// the push path: its value is merged with the stored one, a command that
// passes back the doc it read leaves it as it is (idempotent merge), a
// value that is not a Yjs update rejects the command with
// sync.crdt_merge_failed and writes nothing, and a retry answers the
// stored outcome without merging again.
func TestE2ECRDTRemoteCommandMerges(t *testing.T) {
	forEachDriver(t, func(t *testing.T, d e2eDriver) {
		ups := yjsUpdates(t, 2, nonTrivial)
		ops := syncgo.Operations{Commands: []syncgo.Command{{ID: "editNote",
			Authorize: func(context.Context, syncgo.Caller, any) (bool, error) { return true, nil },
			Run: func(ctx context.Context, c *syncgo.CommandContext, input any) ([]syncgo.Mutation, error) {
				in := input.(map[string]any)
				old, ok, err := c.Row(ctx, "notes", "n1")
				if err != nil || !ok {
					return nil, fmt.Errorf("n1: %v %v", ok, err)
				}
				doc := old["doc"]
				if u, ok := in["update"]; ok {
					doc = u
				}
				title := old["title"]
				if s, ok := in["title"]; ok {
					title = s
				}
				return []syncgo.Mutation{syncgo.Upsert("notes", map[string]any{"id": "n1", "project_id": old["project_id"],
					"title": title, "doc": doc})}, nil
			}}}}
		e := newNotesEnv(t, d, schema.CRDTYjsDoc, func(c *syncgo.Config) { c.Operations = ops })
		a := e.client("alice", sspclient.Options{})
		subscribeNotes(t, a)
		mustNote(t, a, noteRow("n1", "t", ups[0]))
		syncQuiet(t, a)
		run := func(requestID string, params remotewire.Object) map[string]any {
			t.Helper()
			return postOp(t, e, "worker", command("job", "editNote", requestID, params)).msg
		}
		wantDoc := func(what string, version int64, want []byte) {
			t.Helper()
			if row, got := e.storedNote(t, "n1"); row.ServerVersion != version || !bytes.Equal(got["doc"].([]byte), want) {
				t.Fatalf("%s: n1 at v%d with %d doc bytes; want v%d and %d bytes", what, row.ServerVersion, len(got["doc"].([]byte)), version, len(want))
			}
		}
		merged := mustMergeAll(t, ups[0], ups[1])
		if m := run("r1", remotewire.Object{{Key: "update", Value: ups[1]}}); m["status"] != "applied" {
			t.Fatalf("merge command: %v", m)
		}
		wantDoc("after the merge command", 2, merged)
		if m := run("r1", remotewire.Object{{Key: "update", Value: ups[1]}}); m["status"] != "cached" {
			t.Fatalf("retried merge command: %v", m)
		}
		wantDoc("after its retry", 2, merged)
		if m := run("r2", remotewire.Object{{Key: "title", Value: "renamed"}}); m["status"] != "applied" {
			t.Fatalf("title command: %v", m)
		}
		wantDoc("after a command that passes the doc back", 3, merged)
		bad := run("r3", remotewire.Object{{Key: "title", Value: "lost"}, {Key: "update", Value: []byte{1, 1, 1, 0, 0x84, 1, 5, 1, 'a', 0}}})
		if res, _ := bad["results"].([]any); bad["status"] != "rejected" || len(res) != 1 || res[0].(map[string]any)["code"] != syncerr.CodeCRDTMergeFailed {
			t.Fatalf("command with a bad update: %v", bad)
		}
		wantDoc("after the refused command", 3, merged)
		if _, got := e.storedNote(t, "n1"); got["title"] != "renamed" {
			t.Fatalf("title %v after the refused command, want renamed", got["title"])
		}
		syncQuiet(t, a)
		sameRows(t, "A vs server", clientRows(t, a, "notes"), e.serverRows("notes"))
	})
}

// The SQLite image lane (§5.3) carries a merged crdt column as the
// stored bytes: a BLOB equal to the merge of every pushed update.
func TestE2ECRDTSQLiteImageCarriesMergedDoc(t *testing.T) {
	sc := notesSchema(t, schema.CRDTYjsDoc)
	e := newImgEnv(t, func(c *syncgo.Config) { c.Schema = sc })
	e.schema = sc
	ups := yjsUpdates(t, 3, nonTrivial)
	c, err := sspclient.New(e.url, "alice", sc, sspclient.Options{})
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 12; i++ {
		mustNote(t, c, noteRow(fmt.Sprintf("n%02d", i), "t", ups[0]))
	}
	syncQuiet(t, c)
	for _, u := range ups[1:] {
		mustNote(t, c, map[string]any{"id": "n03", "doc": u})
		mustNote(t, c, map[string]any{"id": "n07", "doc": nil})
	}
	syncQuiet(t, c)
	s := e.pull("bob", "img-client", imgAcceptAll, 5, imgSub("s", "notes", -1, nil, "p1"))["s"]
	ref := imgImageOf(t, s)
	d := e.download("bob", ref.SegmentID, map[string][]string{"project_id": {"p1"}})
	if d.status != http.StatusOK {
		t.Fatalf("download: HTTP %d", d.status)
	}
	tbl, _ := sc.Table("notes")
	rows, err := sqliteimage.ReadRows(context.Background(), d.body, tbl.WireColumns(), tbl.PrimaryKey())
	if err != nil || len(rows) != 12 {
		t.Fatalf("image rows: %d, %v; want 12", len(rows), err)
	}
	first, all := mustMergeAll(t, ups[0]), mustMergeAll(t, ups...)
	for i, r := range rows {
		doc := r.Values[3]
		switch i {
		case 3:
			if !bytes.Equal(doc.Bytes, all) || r.ServerVersion != int64(len(ups)) {
				t.Fatalf("n03 in the image: v%d, %d doc bytes; want v%d and the merge of every update", r.ServerVersion, len(doc.Bytes), len(ups))
			}
		case 7:
			if !doc.Null {
				t.Fatalf("n07 in the image: doc %v, want NULL", doc)
			}
		default:
			if !bytes.Equal(doc.Bytes, first) {
				t.Fatalf("row %d in the image: %d doc bytes, want the first update merged", i, len(doc.Bytes))
			}
		}
	}
}

// A realtime subscriber (WebSocket deltas) receives a crdt push as the
// merged document, the bytes the server stored, not the pushed update.
func TestE2ECRDTRealtimeDeltaCarriesMergedDoc(t *testing.T) {
	forEachDriver(t, func(t *testing.T, d e2eDriver) {
		e := newNotesEnv(t, d, schema.CRDTYjsDoc)
		ups := yjsUpdates(t, 2, nonTrivial)
		a := e.client("alice", sspclient.Options{})
		sub := e.client("bob", sspclient.Options{})
		subscribeNotes(t, a)
		subscribeNotes(t, sub)
		mustNote(t, a, noteRow("n1", "t", ups[0]))
		syncQuiet(t, a)
		syncQuiet(t, sub)
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		rt, err := sub.DialRealtime(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer rt.Close()
		if floor, ok := sub.AckFloor(); ok {
			_ = rt.Ack(floor)
		}
		mustNote(t, a, map[string]any{"id": "n1", "doc": ups[1]})
		syncQuiet(t, a)
		want := mustMergeAll(t, ups[0], ups[1])
		tbl, _ := e.schema.Table("notes")
		for {
			if row, ok := sub.Row("notes", "n1"); ok && row.Version == 2 {
				if got := row.Map(tbl)["doc"].([]byte); !bytes.Equal(got, want) {
					t.Fatalf("the delta carried %d doc bytes, want the %d merged bytes", len(got), len(want))
				}
				break
			}
			m, err := rt.Next()
			if err != nil {
				t.Fatalf("realtime: %v (no delta of n1 v2)", err)
			}
			if m.Delta != nil {
				if _, err := sub.ApplyDelta(m.Delta); err != nil {
					t.Fatal(err)
				}
			}
		}
	})
}
