package syncgo_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/syncgo/syncgo"
	"github.com/syncgo/syncgo/crdt/yjs"
	"github.com/syncgo/syncgo/internal/sspclient"
	"github.com/syncgo/syncgo/schema"
	"github.com/syncgo/syncgo/store"
	"github.com/syncgo/syncgo/syncerr"
	"github.com/syncgo/syncgo/wire"
)

// notesSchema mixes an ordinary title column and a crdt doc column of
// crdtType (§5.10.1), as the catalog's crdt scenarios do.
func notesSchema(t *testing.T, crdtType string) *schema.Compiled {
	t.Helper()
	c, err := schema.New(1).
		Table("notes", "id", schema.String("id"), schema.String("project_id"), schema.String("title"),
			schema.CRDT("doc", crdtType).Null()).
		Scope("project:{project_id}").
		Compile()
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// newNotesEnv is a server of notesSchema over real HTTP.
func newNotesEnv(t *testing.T, d e2eDriver, crdtType string, tweak ...func(*syncgo.Config)) *e2eEnv {
	t.Helper()
	sc := notesSchema(t, crdtType)
	e := newE2EEnv(t, d, append([]func(*syncgo.Config){func(c *syncgo.Config) { c.Schema = sc }}, tweak...)...)
	e.schema = sc
	return e
}

// yjsUpdates returns the pushed values of a case of the Yjs equivalence
// fixtures (real Yjs updates) with at least n of them, and that pass the
// optional test fit.
func yjsUpdates(t *testing.T, n int, fit ...func([][]byte) bool) [][]byte {
	t.Helper()
	f, err := os.Open("crdt/yjs/testdata/equivalence.jsonl")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 1<<24)
	for sc.Scan() {
		var fx struct{ Inputs [][]byte }
		if err := json.Unmarshal(sc.Bytes(), &fx); err != nil {
			t.Fatal(err)
		}
		if len(fx.Inputs) >= n && (len(fit) == 0 || fit[0](fx.Inputs)) {
			return fx.Inputs
		}
	}
	t.Fatalf("no fixture with %d inputs", n)
	return nil
}

// nonTrivial: every update carries something (more than the empty
// update's two bytes).
func nonTrivial(ups [][]byte) bool {
	return !slices.ContainsFunc(ups, func(u []byte) bool { return len(u) <= 2 })
}

func noteRow(id, title string, doc any) map[string]any {
	return map[string]any{"id": id, "project_id": "p1", "title": title, "doc": doc}
}

// storedNote returns the server's row n1 of notes as column values.
func (e *e2eEnv) storedNote(t *testing.T, rowID string) (store.Row, map[string]any) {
	t.Helper()
	r, err := e.store.Row(context.Background(), e2ePartition, "notes", rowID)
	if err != nil {
		t.Fatalf("stored %s: %v", rowID, err)
	}
	tbl, _ := e.schema.Table("notes")
	vals, err := tbl.RowCodec().DecodeRow(r.Payload)
	if err != nil {
		t.Fatal(err)
	}
	return r, sspclient.Row{Values: vals}.Map(tbl)
}

func subscribeNotes(t *testing.T, c *sspclient.Client) {
	t.Helper()
	if err := c.Subscribe("notes-p1", "notes", map[string][]string{"project_id": {"p1"}}); err != nil {
		t.Fatal(err)
	}
}

func mustNote(t *testing.T, c *sspclient.Client, values map[string]any, opts ...sspclient.OpOption) string {
	t.Helper()
	id, err := c.Upsert("notes", values, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return id
}

func wantApplied(t *testing.T, c *sspclient.Client, commitID, what string) {
	t.Helper()
	if o, _ := c.Outcome(commitID); o.Status != wire.PushApplied {
		t.Fatalf("%s: %s, want applied", what, statusOf(o))
	}
}

func wantMergeFailed(t *testing.T, c *sspclient.Client, commitID, what string) {
	t.Helper()
	if o, _ := c.Outcome(commitID); o.Status != wire.PushRejected || o.ErrorCode() != syncerr.CodeCRDTMergeFailed {
		t.Fatalf("%s: %s, want rejected with %s", what, statusOf(o), syncerr.CodeCRDTMergeFailed)
	}
}

// Two wire-version-3 clients push Yjs updates to the crdt column of one
// row, crdt-only and with or without a stale baseVersion (§5.10.3): every
// push applies without a conflict, the stored value is the merge of all
// of them (the same bytes whatever the order, so equal to merging them at
// once), a value pushed twice changes nothing, and both replicas converge
// on the server's bytes.
func TestE2ECRDTMergesConcurrentPushes(t *testing.T) {
	forEachDriver(t, func(t *testing.T, d e2eDriver) {
		e := newNotesEnv(t, d, schema.CRDTYjsDoc)
		ups := yjsUpdates(t, 4, nonTrivial)
		a := e.client("alice", sspclient.Options{})
		b := e.client("bob", sspclient.Options{})
		subscribeNotes(t, a)
		subscribeNotes(t, b)
		first := mustNote(t, a, noteRow("n1", "title", ups[0]))
		syncQuiet(t, a)
		wantApplied(t, a, first, "insert")
		if _, got := e.storedNote(t, "n1"); !bytes.Equal(got["doc"].([]byte), mustMergeAll(t, ups[0])) {
			t.Fatal("the inserted value is not the merge of the empty document with the pushed one")
		}
		syncQuiet(t, b)

		// A's crdt-only patch without a base, then B's with the now stale base 1.
		pa := mustNote(t, a, map[string]any{"id": "n1", "doc": ups[1]})
		syncQuiet(t, a)
		pb := mustNote(t, b, map[string]any{"id": "n1", "doc": ups[2]}, sspclient.BaseVersion(1))
		again := mustNote(t, b, map[string]any{"id": "n1", "doc": ups[1]}, sspclient.BaseVersion(1))
		syncQuiet(t, b)
		wantApplied(t, a, pa, "A's crdt patch")
		wantApplied(t, b, pb, "B's crdt patch with a stale base")
		wantApplied(t, b, again, "B's replay of A's value")
		var rest []string
		for _, u := range ups[3:] {
			rest = append(rest, mustNote(t, a, map[string]any{"id": "n1", "doc": u}, sspclient.BaseVersion(1)))
		}
		syncQuiet(t, a)
		for _, id := range rest {
			wantApplied(t, a, id, "A's later patch")
		}
		syncQuiet(t, b)

		row, got := e.storedNote(t, "n1")
		if want := mustMergeAll(t, ups...); !bytes.Equal(got["doc"].([]byte), want) {
			t.Fatalf("stored doc is not the merge of every pushed update (%d vs %d bytes)", len(got["doc"].([]byte)), len(want))
		}
		if got["title"] != "title" {
			t.Fatalf("title = %v, want it untouched by crdt-only patches", got["title"])
		}
		if want := int64(4 + len(ups) - 3); row.ServerVersion != want {
			t.Fatalf("server version %d, want %d (one per applied upsert)", row.ServerVersion, want)
		}
		server := e.serverRows("notes")
		sameRows(t, "A vs server", clientRows(t, a, "notes"), server)
		sameRows(t, "B vs server", clientRows(t, b, "notes"), server)
	})
}

func mustMergeAll(t *testing.T, ups ...[]byte) []byte {
	t.Helper()
	out, err := yjs.Merger{}.MergeUpdates(ups...)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// A patch that presents a non-crdt column with a stale base conflicts on
// that column only (§5.10.3 rule 3): conflictColumns marks the title, not
// the doc, nothing of the commit is merged, and serverRow carries the
// already-merged doc. The same client's crdt-only patch with the same
// stale base applies.
func TestE2ECRDTConflictsOnlyOnOtherColumns(t *testing.T) {
	forEachDriver(t, func(t *testing.T, d e2eDriver) {
		e := newNotesEnv(t, d, schema.CRDTYjsDoc)
		ups := yjsUpdates(t, 3, nonTrivial)
		a := e.client("alice", sspclient.Options{})
		b := e.client("bob", sspclient.Options{})
		subscribeNotes(t, a)
		subscribeNotes(t, b)
		mustNote(t, a, noteRow("n1", "base", ups[0]))
		syncQuiet(t, a)
		syncQuiet(t, b)
		win := mustNote(t, a, map[string]any{"id": "n1", "title": "A", "doc": ups[1]}, sspclient.Versioned())
		syncQuiet(t, a)
		wantApplied(t, a, win, "A's versioned edit")

		lose := mustNote(t, b, map[string]any{"id": "n1", "title": "B", "doc": ups[2]}, sspclient.Versioned())
		res, err := b.Sync(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		cf, ok := pushed(t, res, lose).Conflict()
		if !ok || cf.Code != syncerr.CodeVersionConflict {
			t.Fatalf("B's stale title+doc edit: %s, want a version conflict", statusOf(pushed(t, res, lose)))
		}
		if cols := columnBits(t, b, "notes", cf.ConflictColumns); !slices.Equal(cols, []string{"title"}) {
			t.Fatalf("conflictColumns mark %v, want exactly [title]", cols)
		}
		merged := mustMergeAll(t, ups[0], ups[1])
		srow := decodeRow(t, b, "notes", cf.ServerRow)
		if srow["title"] != "A" || !bytes.Equal(srow["doc"].([]byte), merged) {
			t.Fatalf("serverRow title %v and %d doc bytes; want A and the merged doc", srow["title"], len(srow["doc"].([]byte)))
		}
		if _, got := e.storedNote(t, "n1"); !bytes.Equal(got["doc"].([]byte), merged) {
			t.Fatal("the rejected commit merged its doc")
		}

		docOnly := mustNote(t, b, map[string]any{"id": "n1", "doc": ups[2]}, sspclient.BaseVersion(1))
		syncQuiet(t, b)
		wantApplied(t, b, docOnly, "B's crdt-only patch with the stale base")
		syncQuiet(t, a)
		if _, got := e.storedNote(t, "n1"); got["title"] != "A" || !bytes.Equal(got["doc"].([]byte), mustMergeAll(t, ups[:3]...)) {
			t.Fatalf("stored title %v; want A and the doc merged with B's update", got["title"])
		}
		server := e.serverRows("notes")
		sameRows(t, "A vs server", clientRows(t, a, "notes"), server)
		sameRows(t, "B vs server", clientRows(t, b, "notes"), server)
	})
}

// A wire-version-2 client pushes full rows: without a base its doc merges
// and its title is written; with a stale base the row conflicts as a
// whole (version 2 semantics) and nothing merges.
func TestE2ECRDTWireVersion2(t *testing.T) {
	forEachDriver(t, func(t *testing.T, d e2eDriver) {
		e := newNotesEnv(t, d, schema.CRDTYjsDoc)
		ups := yjsUpdates(t, 3, nonTrivial)
		a := e.client("alice", sspclient.Options{})
		b := e.client("bob", sspclient.Options{WireVersion: wire.Version2})
		subscribeNotes(t, a)
		subscribeNotes(t, b)
		mustNote(t, a, noteRow("n1", "base", ups[0]))
		syncQuiet(t, a)
		syncQuiet(t, b)
		mustNote(t, a, map[string]any{"id": "n1", "doc": ups[1]})
		syncQuiet(t, a)

		stale := mustNote(t, b, noteRow("n1", "B", ups[2]), sspclient.BaseVersion(1))
		syncQuiet(t, b)
		if o, _ := b.Outcome(stale); o.Status != wire.PushRejected || o.ErrorCode() != syncerr.CodeVersionConflict {
			t.Fatalf("v2 full row with a stale base: %s, want a version conflict", statusOf(o))
		}
		lww := mustNote(t, b, noteRow("n1", "B", ups[2]))
		syncQuiet(t, b)
		wantApplied(t, b, lww, "v2 full row without a base")
		syncQuiet(t, a)
		if _, got := e.storedNote(t, "n1"); got["title"] != "B" || !bytes.Equal(got["doc"].([]byte), mustMergeAll(t, ups[:3]...)) {
			t.Fatalf("stored title %v; want B and the doc merged with every update", got["title"])
		}
		server := e.serverRows("notes")
		sameRows(t, "A vs server", clientRows(t, a, "notes"), server)
		sameRows(t, "B vs server", clientRows(t, b, "notes"), server)
	})
}

// Bytes that are not a Yjs update, and a merge over Limits.MaxCRDTBytes,
// reject the operation with sync.crdt_merge_failed and roll the commit
// back: the title edit of the same commit is not written, no commit is
// appended, an insert leaves no row. A pushed NULL clears the column.
func TestE2ECRDTRefusedMergesWriteNothing(t *testing.T) {
	forEachDriver(t, func(t *testing.T, d e2eDriver) {
		// The bound lets the first update and the second alone in, not
		// their merge.
		bound := func(ups [][]byte) int { return len(mustMergeAll(t, ups[0], ups[1])) - 1 }
		ups := yjsUpdates(t, 2, func(ups [][]byte) bool {
			return len(ups[0]) > 2 && len(mustMergeAll(t, ups[0])) <= bound(ups) && len(ups[1]) <= bound(ups)
		})
		first, limit := mustMergeAll(t, ups[0]), bound(ups)
		e := newNotesEnv(t, d, schema.CRDTYjsDoc, func(c *syncgo.Config) { c.Limits.MaxCRDTBytes = limit })
		a := e.client("alice", sspclient.Options{})
		subscribeNotes(t, a)
		mustNote(t, a, noteRow("n1", "base", ups[0]))
		syncQuiet(t, a)
		before := e.partitionState()

		garbage := []byte{0x01, 0x01, 0x05, 0x00, 0x24}
		bad, err := a.Mutate(func(tx *sspclient.Tx) error {
			if err := tx.Upsert("notes", map[string]any{"id": "n1", "title": "changed"}); err != nil {
				return err
			}
			return tx.Upsert("notes", map[string]any{"id": "n1", "doc": garbage})
		})
		if err != nil {
			t.Fatal(err)
		}
		newRow := mustNote(t, a, noteRow("n2", "new", garbage))
		tooBig := mustNote(t, a, map[string]any{"id": "n1", "doc": bytes.Repeat([]byte{0}, limit+1)})
		syncQuiet(t, a)
		wantMergeFailed(t, a, bad, "malformed update after a title edit")
		wantMergeFailed(t, a, newRow, "insert with a malformed update")
		wantMergeFailed(t, a, tooBig, "a value over MaxCRDTBytes")
		if o, _ := a.Outcome(bad); o.Results[len(o.Results)-1].OpIndex != 1 {
			t.Fatalf("the rejection names operation %d, want 1", o.Results[len(o.Results)-1].OpIndex)
		}
		over := mustNote(t, a, map[string]any{"id": "n1", "doc": ups[1]})
		syncQuiet(t, a)
		wantMergeFailed(t, a, over, "a merge over MaxCRDTBytes")
		if row, got := e.storedNote(t, "n1"); got["title"] != "base" || !bytes.Equal(got["doc"].([]byte), first) || row.ServerVersion != 1 {
			t.Fatalf("n1 = v%d title %v; want v1 untouched", row.ServerVersion, got["title"])
		}
		if _, err := e.store.Row(context.Background(), e2ePartition, "notes", "n2"); !errors.Is(err, store.ErrNotFound) {
			t.Fatalf("n2 after a refused insert: %v, want not found", err)
		}
		if after := e.partitionState(); after.MaxCommitSeq != before.MaxCommitSeq {
			t.Fatalf("refused commits moved the log from %d to %d", before.MaxCommitSeq, after.MaxCommitSeq)
		}

		clear := mustNote(t, a, map[string]any{"id": "n1", "doc": nil})
		syncQuiet(t, a)
		wantApplied(t, a, clear, "NULL doc")
		if _, got := e.storedNote(t, "n1"); got["doc"] != nil {
			t.Fatalf("doc = %v after a NULL push, want NULL", got["doc"])
		}
		refill := mustNote(t, a, map[string]any{"id": "n1", "doc": ups[0]})
		syncQuiet(t, a)
		wantApplied(t, a, refill, "doc after NULL")
		if _, got := e.storedNote(t, "n1"); !bytes.Equal(got["doc"].([]byte), first) {
			t.Fatal("a push onto a NULL doc is not the merge with the empty document")
		}
	})
}

// maxMerger is a host merger for a test crdtType: the value is a
// big-endian uint64 and the merge keeps the larger (commutative,
// associative, idempotent). Other lengths fail; the value 13 panics.
var maxMerger = syncgo.CRDTMergerFunc(func(stored, incoming []byte) ([]byte, error) {
	if len(incoming) != 8 || stored != nil && len(stored) != 8 {
		return nil, errors.New("a max value is 8 bytes")
	}
	if binary.BigEndian.Uint64(incoming) == 13 {
		panic("unlucky")
	}
	if stored != nil && binary.BigEndian.Uint64(stored) > binary.BigEndian.Uint64(incoming) {
		return stored, nil
	}
	return incoming, nil
})

func u64(v uint64) []byte { return binary.BigEndian.AppendUint64(nil, v) }

// A host registers its own merger by crdtType; pushes merge through it,
// its errors and panics reject with sync.crdt_merge_failed.
func TestE2ECRDTHostMerger(t *testing.T) {
	forEachDriver(t, func(t *testing.T, d e2eDriver) {
		e := newNotesEnv(t, d, "max-u64", func(c *syncgo.Config) {
			c.CRDTMergers = map[string]syncgo.CRDTMerger{"max-u64": maxMerger}
		})
		a := e.client("alice", sspclient.Options{})
		subscribeNotes(t, a)
		mustNote(t, a, noteRow("n1", "t", u64(5)))
		lower := mustNote(t, a, map[string]any{"id": "n1", "doc": u64(3)})
		higher := mustNote(t, a, map[string]any{"id": "n1", "doc": u64(9)})
		bad := mustNote(t, a, map[string]any{"id": "n1", "doc": []byte{1}})
		panics := mustNote(t, a, map[string]any{"id": "n1", "doc": u64(13)})
		syncQuiet(t, a)
		wantApplied(t, a, lower, "a lower value")
		wantApplied(t, a, higher, "a higher value")
		wantMergeFailed(t, a, bad, "a value the merger refuses")
		wantMergeFailed(t, a, panics, "a value the merger panics on")
		if _, got := e.storedNote(t, "n1"); !bytes.Equal(got["doc"].([]byte), u64(9)) {
			t.Fatalf("doc = %x, want the maximum 9", got["doc"])
		}
		sameRows(t, "A vs server", clientRows(t, a, "notes"), e.serverRows("notes"))
	})
}

// New refuses a schema whose crdt column names a crdtType without a
// merger: an unknown name, or yjs-doc unregistered by a nil entry.
func TestNewRefusesUnknownCRDTType(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		crdtType string
		mergers  map[string]syncgo.CRDTMerger
		ok       bool
	}{
		{"yjs-doc", nil, true},
		{"automerge", nil, false},
		{"automerge", map[string]syncgo.CRDTMerger{"automerge": maxMerger}, true},
		{"yjs-doc", map[string]syncgo.CRDTMerger{"yjs-doc": nil}, false},
		{"yjs-doc", map[string]syncgo.CRDTMerger{"other": maxMerger}, true},
	} {
		_, err := syncgo.New(syncgo.Config{Store: openSQLite(t), Schema: notesSchema(t, tc.crdtType),
			Authenticate: bearerAuth, ResolveScopes: func(context.Context, syncgo.ScopeRequest) (map[string][]string, error) { return nil, nil },
			CRDTMergers: tc.mergers})
		switch {
		case tc.ok && err != nil:
			t.Errorf("%s with %v: %v", tc.crdtType, tc.mergers, err)
		case !tc.ok && (err == nil || !strings.Contains(err.Error(), `crdtType "`+tc.crdtType+`"`) || !strings.Contains(err.Error(), `"doc"`)):
			t.Errorf("%s with %v: err %v, want a refusal naming the column and the crdtType", tc.crdtType, tc.mergers, err)
		}
	}
}
